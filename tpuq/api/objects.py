"""Database rows as the JSON objects the CLI prints and scripts read (the job object's
type is tpuq/jobjson.py; the contract, docs/reference.md "The JSON contract").

Environment values a job captured from its owner's shell are the owner's: anyone else
(admins aside) sees their names only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

from tpuq.api.caller import Caller
from tpuq.jobjson import iso_time
from tpuq.spec import format_duration, job_label
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

# a queue's jobs share a few grace periods and time limits: each is written once
_duration = lru_cache(maxsize=256)(format_duration)

HIDDEN = "(hidden)"  # what a job's env value looks like to anyone but its owner and admins


def job_object(row: Any, waiting: str | None = None, current: Any = None) -> JobObject:
    """The stable JSON shape of a job; `current` (its latest attempt) for `status`.
    Times as ISO 8601, durations as options take them (tpuq/jobjson.py)."""
    # a Row as one dict, read by key: a Row's attribute access costs ~1 us a name, a
    # missing one ~10 us (an error built to be caught), a third of listing 10,000 jobs
    r = row if isinstance(row, dict) else \
        row._asdict() if hasattr(row, "_asdict") else _columns(row)
    obj: JobObject = {
        "id": r["id"], "name": job_label(r["name"], r["command"]), "state": r["state"],
        "attempts": r["attempt"],
        "host": r["host"], "exit_code": r["exit_code"], "exit_signal": r["exit_signal"],
        "command": list(r["command"]), "cwd": r["cwd"], "owner": r["owner"],
        "team": r["team"], "chips": r["chips"], "whole_host": r["chips"] is None,
        "tpu_type": r["tpu_type"],
        "priority": r["priority"], "preemptions": r["preemptions"],
        "failures": r["failures"], "max_retries": r["max_retries"],
        "submitted_at": iso_time(r["submitted_at"]) or "", "ended_at": iso_time(r["ended_at"]),
        "reason": r["reason"],
        "waiting_for": waiting, "resubmit_of": r["resubmit_of"],
        "stop_signal": r["stop_signal"], "grace": _duration(r["grace_s"]),
        "time_limit": None if r["time_limit_s"] is None else _duration(r["time_limit_s"]),
        "stop_request": r["stop_request"],
        "notify": r["notify"], "array_id": r["array_id"], "array_index": r["array_index"],
        # TPU variables of the submitter's shell the job does not get (jobenv.dropped)
        "env_dropped": list(r.get("env_dropped") or ()),
        "started_at": None, "step": None, "step_at": None, "total": None, "eta_at": None,
        # where its checkpoints live, and the host holding them when only that one can
        # reach them (None: a shared root, or none yet)
        "checkpoint_dir": r.get("checkpoint_dir"),
        "checkpoint_host": r.get("checkpoint_host"),
        # --begin, --output (its template), and where each option came from
        "begin_at": iso_time(r.get("begin_at")), "output": r.get("output"),
        "option_sources": dict(r.get("option_sources") or {}),
        "session": bool(r.get("session")),  # interactive (`tpuq run`)
    }
    if current is not None:
        obj["started_at"] = iso_time(getattr(current, "started_at", None))
        obj["step"] = getattr(current, "checkpoint_step", None)
        obj["step_at"] = iso_time(getattr(current, "checkpoint_at", None))
        obj["total"] = getattr(current, "checkpoint_total", None)
        obj["eta_at"] = iso_time(getattr(current, "eta_at", None))
        held = getattr(current, "chips", None)
        if obj["whole_host"] and held is not None:  # the host's count
            obj["chips"] = len(held)
    return obj


def row_dicts(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """Rows of one query as dicts, their keys read once: `Row._asdict` builds a key view
    per row, twice the cost for a listing of 10,000 jobs."""
    if not rows:
        return []
    keys = rows[0]._fields
    return [dict(zip(keys, r)) for r in rows]


def listed_job(row: Any, waiting: str | None = None, current: Any = None,
               start: Any = None, tasks: list[int] | None = None) -> ListedJob:
    """A job of `status`; `start` (a forecast.Start) for `status --start`, which adds
    `expected_start` (or None: no estimate) and the reason in `waiting_for`;
    `tasks`: the indices of an array's waiting tasks folded into this row."""
    # a JobObject is a ListedJob without the keys of --start: no copy on the hot path
    obj = cast("ListedJob", job_object(row, waiting, current))
    if tasks is not None:
        obj["tasks"] = tasks
    if start is not None:
        obj["expected_start"] = iso_time(start.at)
        obj["position"] = start.position
        obj["waiting_for"] = start.why or None
    return obj


_JOB_FIELDS = ("id", "name", "state", "attempt", "host", "exit_code", "exit_signal", "command",
               "cwd", "owner", "team", "chips", "tpu_type", "priority", "preemptions",
               "failures", "max_retries", "submitted_at", "ended_at", "reason",
               "resubmit_of", "stop_signal", "grace_s", "time_limit_s", "stop_request",
               "notify", "array_id", "array_index", "env_dropped", "checkpoint_dir",
               "checkpoint_host", "begin_at", "output", "option_sources", "session")


def _columns(row: Any) -> dict[str, Any]:
    """An ORM object's (or another row's) fields as job_object reads them."""
    return {name: getattr(row, name, None) for name in _JOB_FIELDS}


def shown_job(row: Any, viewer: Caller, env: Mapping[str, str], waiting: str | None,
              attempts: list[AttemptObject], workers: list[WorkerObject],
              events: list[EventObject], told: list[NotificationObject],
              over_budget: list[dict[str, Any]], after: list[Any],
              array_tasks: list[Any]) -> ShownJob:
    """`show`'s job object: the job, its environment (values only for its owner and
    admins), attempts, a slice job's workers, events, messages, logs over budget, what it
    waits for (`after`), and an array's tasks when `row` is its first."""
    obj = cast("ShownJob", job_object(row, waiting=waiting))
    if obj["whole_host"] and attempts:  # the host's count, as its latest attempt held
        obj["chips"] = len(attempts[-1]["chips"])
    obj["env"] = dict(env) if viewer.owns(row.owner) else dict.fromkeys(env, HIDDEN)
    obj["attempt_list"] = attempts
    if workers:  # a slice job: its current attempt's workers
        obj["worker_list"] = workers
    obj["events"] = events
    obj["notifications"] = told
    obj["logs_over_budget"] = over_budget
    obj["after"] = after
    if array_tasks:  # the id of an array is its first task's: `show` says it is both
        obj["array_tasks"] = array_tasks
    return obj


def attempt_object(a: Any) -> AttemptObject:
    return {"number": a.number, "host": a.host, "chips": list(a.chips or ()), "pid": a.pid,
            "boot_id": a.boot_id, "started_at": iso_time(a.started_at),
            "ended_at": iso_time(a.ended_at),
            "outcome": a.outcome, "exit_code": a.exit_code, "exit_signal": a.exit_signal,
            "reason": a.reason, "log_path": a.log_path, "checkpoint_step": a.checkpoint_step,
            "checkpoint_at": iso_time(a.checkpoint_at), "checkpoint_total": a.checkpoint_total,
            "eta_at": iso_time(a.eta_at), "started_over": getattr(a, "started_over", None)}


def notification_object(n: Any) -> NotificationObject:
    """One message to the job's owner (its destinations are never shown: tokens)."""
    return {"event": n.event, "state": n.state, "tries": n.tries,
            "at": iso_time(n.created_at) or "", "sent_at": iso_time(n.sent_at),
            "error": n.last_error, "detail": getattr(n, "detail", None)}


def event_object(e: Any) -> EventObject:
    return {"at": iso_time(e.at) or "", "from": e.from_state, "to": e.to_state, "attempt": e.attempt,
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
