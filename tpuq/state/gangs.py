"""Slice jobs in the database: one job, one attempt, one row per worker (a gang).

A slice job's row names its slice as its `host`: the job's lease and every transition
of the job are fenced on (job, attempt, slice) exactly as a single-host job's are on
its host, and worker 0's agent holds that lease. Each worker has a `gang_workers` row,
written with the assignment in the scheduler's transaction together with the chip rows
of every worker (all or none), and moved by that worker's agent:

    assigned -> ready      the worker's TPU is free and the job's directories exist
    ready -> running       once worker 0's agent moved the job itself to running (the
                           barrier: it does so only when every row is ready)
    * -> ended             how the worker's process ended, or why it never started

Each worker renews its own row's lease, guarded on the job still being at this attempt:
when worker 0 ends the attempt, every other worker's renewal changes nothing and its
process is stopped (fenced, as a lost lease). Worker 0 ends the attempt once every
worker has ended or lost its lease, with the outcome `gang_ending` decides, and the
chips of every worker are released in that one transaction (attempts.finish).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, and_, exists, insert, select, update
from sqlalchemy.orm import Session

from tpuq.state import attempts
from tpuq.state.clock import db_now
from tpuq.state.db import rows_changed
from tpuq.state.models import Allocation, GangWorker, Job
from tpuq.state.states import ACTIVE, NOT_CHARGED, JobState, Outcome, StopRequest
from tpuq.state.transitions import transition

GANG = cast(Table, GangWorker.__table__)
JOBS = cast(Table, Job.__table__)
ALLOCATIONS = cast(Table, Allocation.__table__)
_ACTIVE = [s.value for s in ACTIVE]
# the job columns a worker needs to run its task (as attempts.START_COLUMNS)
SPEC_COLUMNS = tuple(JOBS.c[n] for n in (*attempts.RUN_FIELDS, "workers", "host", "state"))


def assign(s: Session, job_id: int, attempt_now: int, slice_name: str,
           workers: Sequence[tuple[str, Sequence[int]]], lease_s: float) -> int | None:
    """queued -> assigned for a slice job, in the caller's transaction: the attempt (its
    chips numbered across the slice, so usage charges every chip of every worker), every
    worker's chip rows and gang row. None when the job changed meanwhile; a chip booked
    twice fails the transaction (primary key), as for any job."""
    total = sum(len(chips) for _, chips in workers)
    hosts = ", ".join(f"w{w} {host}" for w, (host, _) in enumerate(workers))
    new = attempts.assign(s, job_id, attempt_now, slice_name, range(total), lease_s,
                          reason=f"assigned to slice {slice_name}: {hosts}", book=False)
    if new is None:
        return None
    s.execute(insert(ALLOCATIONS), [
        {"host": host, "chip": c, "job_id": job_id, "attempt": new}
        for host, chips in workers for c in chips])
    s.execute(insert(GANG), [
        {"job_id": job_id, "attempt": new, "worker": w, "host": host, "state": "assigned"}
        for w, (host, _) in enumerate(workers)])
    return new


def _current(job_id: int, attempt: int) -> Any:
    """The job is still at this attempt and holds its workers."""
    return exists(select(JOBS.c.id).where(JOBS.c.id == job_id, JOBS.c.attempt == attempt,
                                          JOBS.c.state.in_(_ACTIVE)))


def assigned_to(s: Session, host: str) -> list[tuple[int, int]]:
    """(job, attempt) of slice jobs with a worker on `host` that has not got ready yet."""
    rows = s.execute(select(GANG.c.job_id, GANG.c.attempt).join(
        JOBS, and_(JOBS.c.id == GANG.c.job_id, JOBS.c.attempt == GANG.c.attempt))
        .where(GANG.c.host == host, GANG.c.state == "assigned",
               JOBS.c.state == JobState.ASSIGNED.value)).all()
    return [(r.job_id, r.attempt) for r in rows]


def active_on_host(s: Session, host: str) -> list[tuple[int, int, int, str]]:
    """(job, attempt, worker, job state) of slice jobs holding a worker on `host`."""
    rows = s.execute(select(GANG.c.job_id, GANG.c.attempt, GANG.c.worker, JOBS.c.state).join(
        JOBS, and_(JOBS.c.id == GANG.c.job_id, JOBS.c.attempt == GANG.c.attempt))
        .where(GANG.c.host == host, GANG.c.state != "ended",
               JOBS.c.state.in_(_ACTIVE))).all()
    return [(r.job_id, r.attempt, r.worker, r.state) for r in rows]


def worker_of(s: Session, job_id: int, attempt: int, host: str) -> Any | None:
    """This host's gang row with what the worker needs of the job (SPEC_COLUMNS, plus
    `gang_state`, `job_attempt`, `assigned_at` and the database clock `now`); None when
    the host has no worker in this attempt."""
    return s.execute(
        select(GANG.c.worker, GANG.c.state.label("gang_state"), *SPEC_COLUMNS,
               JOBS.c.attempt.label("job_attempt"),
               attempts.ATTEMPTS.c.assigned_at, db_now().label("now"))
        .join(JOBS, JOBS.c.id == GANG.c.job_id)
        .join(attempts.ATTEMPTS, and_(attempts.ATTEMPTS.c.job_id == GANG.c.job_id,
                                      attempts.ATTEMPTS.c.number == GANG.c.attempt))
        .where(GANG.c.job_id == job_id, GANG.c.attempt == attempt, GANG.c.host == host)
    ).first()


def _row(job_id: int, attempt: int, worker: int) -> Any:
    return and_(GANG.c.job_id == job_id, GANG.c.attempt == attempt, GANG.c.worker == worker)


def _move(s: Session, job_id: int, attempt: int, worker: int, frm: Sequence[str],
          **values: Any) -> bool:
    """Move one worker's row out of a state in `frm`, while the job is at this attempt."""
    return bool(rows_changed(s.execute(update(GANG).where(
        _row(job_id, attempt, worker), GANG.c.state.in_(frm), _current(job_id, attempt))
        .values(**values))))


def ready(s: Session, job_id: int, attempt: int, worker: int) -> bool:
    return _move(s, job_id, attempt, worker, ["assigned"], state="ready")


def running(s: Session, job_id: int, attempt: int, worker: int, *, pid: int | None,
            proc_start: int | None, log_path: str, lease_s: float) -> bool:
    return _move(s, job_id, attempt, worker, ["ready"], state="running", pid=pid,
                 proc_start=proc_start,
                 log_path=log_path, started_at=db_now(), lease_expires_at=db_now() + lease_s)


def ended(s: Session, job_id: int, attempt: int, worker: int, end: attempts.Ending) -> bool:
    """The worker's end (its process's, or why it could not start), once."""
    return bool(rows_changed(s.execute(update(GANG).where(
        _row(job_id, attempt, worker), GANG.c.state != "ended").values(
            state="ended", ended_at=db_now(), outcome=end.outcome.value,
            untouched=end.untouched, exit_code=end.exit_code, exit_signal=end.exit_signal,
            reason=end.reason[:2000], lease_expires_at=None))))


def renew(s: Session, job_id: int, attempt: int, worker: int, lease_s: float
          ) -> attempts.Lease:
    """Extend this worker's lease while the job is at this attempt; held=False means the
    attempt ended (or was taken away): stop the process now."""
    if not _move(s, job_id, attempt, worker, ["ready", "running"],
                 lease_expires_at=db_now() + lease_s):
        return attempts.Lease(False)
    stop = s.execute(select(JOBS.c.stop_request).where(JOBS.c.id == job_id)).scalar()
    return attempts.Lease(True, stop)


@dataclass(frozen=True)
class Member:
    worker: int
    host: str
    state: str
    outcome: str | None
    untouched: bool
    exit_code: int | None
    exit_signal: int | None
    reason: str | None
    ended_at: float | None
    lease_lost: bool  # running, and its lease ran out: its agent is gone


def members(s: Session, job_id: int, attempt: int, margin_s: float = 0.0) -> list[Member]:
    """Every worker of the attempt, in worker order. A worker whose lease ran out more
    than `margin_s` ago counts as lost (its keeper has stopped its process by then)."""
    now = db_now()
    rows = s.execute(select(GANG, (GANG.c.lease_expires_at < now - margin_s).label("lost"))
                     .where(GANG.c.job_id == job_id, GANG.c.attempt == attempt)
                     .order_by(GANG.c.worker)).all()
    return [Member(r.worker, r.host, r.state, r.outcome, bool(r.untouched), r.exit_code,
                   r.exit_signal, r.reason, r.ended_at,
                   bool(r.lost) and r.state in ("ready", "running")) for r in rows]


def workers_of(s: Session, job_ids: Sequence[int]) -> dict[int, list[Any]]:
    """For `show`: every worker row of these jobs' current attempts."""
    if not job_ids:
        return {}
    rows = s.execute(select(GANG).join(JOBS, and_(JOBS.c.id == GANG.c.job_id,
                                                  JOBS.c.attempt == GANG.c.attempt))
                     .where(GANG.c.job_id.in_(list(job_ids))).order_by(GANG.c.worker)).all()
    out: dict[int, list[Any]] = {}
    for r in rows:
        out.setdefault(r.job_id, []).append(r)
    return out


def log_paths(s: Session, job_id: int) -> dict[tuple[int, int], tuple[str, str | None]]:
    """(attempt, worker) -> (host, its log file) of every attempt (`tpuq logs --worker`)."""
    rows = s.execute(select(GANG.c.attempt, GANG.c.worker, GANG.c.host, GANG.c.log_path)
                     .where(GANG.c.job_id == job_id)).all()
    return {(r.attempt, r.worker): (r.host, r.log_path) for r in rows}


# ---- what the gang's end is: pure ------------------------------------------------------
def first_cause(ms: Sequence[Member]) -> Member | None:
    """The worker whose own end stopped the gang: the earliest that ended by itself
    (before any stop signal) other than by succeeding, or failing that, one lost."""
    causes = [m for m in ms if m.state == "ended" and m.untouched
              and m.outcome != Outcome.SUCCEEDED.value]
    if causes:
        return min(causes, key=lambda m: (m.ended_at or 0.0, m.worker))
    return next((m for m in ms if m.lease_lost), None)


def gang_ending(ms: Sequence[Member]) -> attempts.Ending | None:
    """How the attempt ends, once every worker ended or is lost (None before):
    all exited 0 -> succeeded; otherwise the first cause's outcome, so one application
    failure fails the job (its retries as usual) while exit 75, a host error or a lost
    worker requeue the whole gang uncharged. A stop someone asked for (cancel, notice,
    time limit) decides over all of these in attempts.finish, as for any job."""
    if not ms or any(m.state != "ended" and not m.lease_lost for m in ms):
        return None
    n = len(ms)
    if all(m.state == "ended" and m.outcome == Outcome.SUCCEEDED.value for m in ms):
        return attempts.Ending(Outcome.SUCCEEDED, f"all {n} workers exited 0", 0,
                               untouched=all(m.untouched for m in ms))
    cause = first_cause(ms)
    if cause is None:
        return attempts.Ending(Outcome.PREEMPTED, f"the gang of {n} workers was stopped")
    if cause.lease_lost:
        return attempts.Ending(Outcome.LOST, f"worker {cause.worker} ({cause.host}) lost: "
                               "its agent stopped answering; the gang was stopped")
    outcome = Outcome(cause.outcome or Outcome.FAILED.value)
    why = f"worker {cause.worker} ({cause.host}): {cause.reason or outcome.value}"
    if outcome not in NOT_CHARGED and outcome is not Outcome.FAILED:
        outcome = Outcome.FAILED
    return attempts.Ending(outcome, why, cause.exit_code, cause.exit_signal)


def request_stop(s: Session, job_id: int, attempt: int, why: str) -> bool:
    """running -> preempting with the gang's stop request: every worker's next renewal
    sees it and signals its process. Nothing when a stop is already under way."""
    return transition(s, job_id, [JobState.RUNNING], JobState.PREEMPTING, attempt=attempt,
                      reason=why, actor="agent",
                      values={"stop_request": StopRequest.GANG.value})


def stop_reason(m: Member) -> str:
    """Why the gang is stopped, for the job's event when one worker's end stops it."""
    if m.lease_lost:
        return f"worker {m.worker} ({m.host}) lost its agent: stopping the gang"
    return f"worker {m.worker} ({m.host}) ended ({m.reason or m.outcome}): stopping the gang"
