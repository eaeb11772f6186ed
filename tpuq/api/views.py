"""Database rows as the JSON objects the CLI prints and scripts read (the job object's
type is tpuq/jobjson.py; the contract, docs/reference.md "The JSON contract").

Environment values a job captured from its owner's shell are the owner's: anyone else
(admins aside) sees their names only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from tpuq.api.caller import Caller
from tpuq.state import hosts as hosts_mod

if TYPE_CHECKING:  # the job object's types cost nothing at run time
    from tpuq.jobjson import (
        AttemptObject,
        EventObject,
        JobObject,
        ListedJob,
        NotificationObject,
        ShownJob,
        WorkerObject,
    )

HIDDEN = "(hidden)"  # what a job's env value looks like to anyone but its owner and admins


def job_object(row: Any, waiting: str | None = None, current: Any = None) -> JobObject:
    """The stable JSON shape of a job; `current` (its latest attempt) for `status`."""
    return {
        "id": row.id, "name": row.name, "state": row.state, "attempts": row.attempt,
        "host": row.host, "exit_code": row.exit_code, "exit_signal": row.exit_signal,
        "command": list(row.command), "cwd": row.cwd, "owner": row.owner, "team": row.team,
        "chips": row.chips, "tpu_type": row.tpu_type, "priority": row.priority,
        "preemptions": row.preemptions, "failures": row.failures,
        "max_retries": row.max_retries, "submitted_at": row.submitted_at,
        "ended_at": row.ended_at, "reason": row.reason, "waiting_for": waiting,
        "resubmit_of": row.resubmit_of, "stop_signal": row.stop_signal,
        "grace_s": row.grace_s, "time_limit_s": row.time_limit_s,
        "stop_request": row.stop_request, "notify": row.notify,
        "array_id": row.array_id, "array_index": row.array_index,
        # TPU variables of the submitter's shell the job does not get (jobenv.dropped)
        "env_dropped": list(getattr(row, "env_dropped", None) or ()),
        "started_at": getattr(current, "started_at", None),
        "step": getattr(current, "checkpoint_step", None),
        "step_at": getattr(current, "checkpoint_at", None),
        "total": getattr(current, "checkpoint_total", None),
        "eta_at": getattr(current, "eta_at", None),
        # where its checkpoints live, and the host holding them when only that one can
        # reach them (None: a shared root, or none yet)
        "checkpoint_dir": getattr(row, "checkpoint_dir", None),
        "checkpoint_host": getattr(row, "checkpoint_host", None),
    }


def listed_job(row: Any, waiting: str | None = None, current: Any = None,
               start: Any = None) -> ListedJob:
    """A job of `status`; `start` (a forecast.Start) for `status --start`, which adds
    `expected_start` (epoch s, or None: no estimate) and the reason in `waiting_for`."""
    # a JobObject is a ListedJob without the keys of --start: no copy on the hot path
    obj = cast("ListedJob", job_object(row, waiting, current))
    if start is not None:
        obj["expected_start"] = start.at
        obj["position"] = start.position
        obj["waiting_for"] = start.why or None
    return obj


def shown_job(row: Any, viewer: Caller, env: Mapping[str, str], waiting: str | None,
              attempts: list[AttemptObject], workers: list[WorkerObject],
              events: list[EventObject], told: list[NotificationObject],
              over_budget: list[dict[str, Any]]) -> ShownJob:
    """`show`'s job object: the job, its environment (values only for its owner and
    admins), attempts, a slice job's workers, events, messages, logs over budget."""
    obj = cast("ShownJob", job_object(row, waiting=waiting))
    obj["env"] = dict(env) if viewer.owns(row.owner) else dict.fromkeys(env, HIDDEN)
    obj["attempt_list"] = attempts
    if workers:  # a slice job: its current attempt's workers
        obj["worker_list"] = workers
    obj["events"] = events
    obj["notifications"] = told
    obj["logs_over_budget"] = over_budget
    return obj


def attempt_object(a: Any) -> AttemptObject:
    return {"number": a.number, "host": a.host, "chips": list(a.chips or ()), "pid": a.pid,
            "boot_id": a.boot_id, "started_at": a.started_at, "ended_at": a.ended_at,
            "outcome": a.outcome, "exit_code": a.exit_code, "exit_signal": a.exit_signal,
            "reason": a.reason, "log_path": a.log_path, "checkpoint_step": a.checkpoint_step,
            "checkpoint_at": a.checkpoint_at, "checkpoint_total": a.checkpoint_total,
            "eta_at": a.eta_at, "started_over": getattr(a, "started_over", None)}


def notification_object(n: Any) -> NotificationObject:
    """One message to the job's owner (its destinations are never shown: tokens)."""
    return {"event": n.event, "state": n.state, "tries": n.tries, "at": n.created_at,
            "sent_at": n.sent_at, "error": n.last_error, "detail": getattr(n, "detail", None)}


def event_object(e: Any) -> EventObject:
    return {"at": e.at, "from": e.from_state, "to": e.to_state, "attempt": e.attempt,
            "reason": e.reason, "actor": e.actor}


def host_object(h: Any, jobs: Mapping[int, list[int]], now: float,
                stale_s: float, min_code: str | None,
                over_budget: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A host and why it takes no work, in words (`state`: "ok" when it takes work);
    whose job logs there are over budget."""
    state = hosts_mod.out_of_service(h, now, stale_s, min_code) or "ok"
    return {"name": h.name, "tpu_type": h.tpu_type, "chips": list(h.chips or ()),
            "used": sum(len(c) for c in jobs.values()), "jobs": sorted(jobs),
            "heartbeat_at": h.heartbeat_at, "state": state,
            # where jobs keep checkpoints there: a shared root, or None (its own disk)
            "checkpoint_root": getattr(h, "checkpoint_root", None),
            # a worker of a multi-host slice: the slice, its type, this worker's number
            "slice": h.slice_name, "slice_type": h.slice_type, "worker": h.slice_worker,
            # chip counts (or "*", every shape) it does not offer, and why (shape probes)
            "unavailable": dict(getattr(h, "unavailable", None) or {}),
            "logs_over_budget": over_budget or []}


def budget_object(row: Any) -> dict[str, Any]:
    """An owner whose job logs on a host take more than the budget (state/logusage.py),
    with what to say of it."""
    from tpuq.spec import show_size

    return {"owner": row.owner, "host": row.place, "bytes": row.bytes, "budget": row.budget,
            "says": f"{row.owner}'s job logs take {show_size(row.bytes)} on {row.place}, over "
                    f"the {show_size(row.budget)} each user may keep on a host "
                    "(TPUQ_LOG_BUDGET_BYTES): the oldest ended attempts' logs go first, a "
                    "running job's are kept"}


def worker_object(w: Any) -> WorkerObject:
    """One worker of a slice job's attempt (`show`)."""
    return {"worker": w.worker, "attempt": w.attempt, "host": w.host, "state": w.state,
            "pid": w.pid, "outcome": w.outcome, "exit_code": w.exit_code,
            "exit_signal": w.exit_signal, "reason": w.reason}
