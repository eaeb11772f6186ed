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

from sqlalchemy import Table, and_, exists, insert, or_, select, update
from sqlalchemy.orm import Session

from tpuq.checkpoints import Placement
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
SPEC_COLUMNS = tuple(JOBS.c[n] for n in (*attempts.RUN_FIELDS, "workers", "host", "state",
                                          "tpu_type"))


def assign(s: Session, job_id: int, attempt_now: int, slice_name: str,
           workers: Sequence[tuple[str, Sequence[int]]], lease_s: float,
           checkpoint: Placement | None = None) -> int | None:
    """queued -> assigned for a slice job, in the caller's transaction: the attempt (its
    chips numbered across the slice, so usage charges every chip of every worker), every
    worker's chip rows and gang row. None when the job changed meanwhile; a chip booked
    twice fails the transaction (primary key), as for any job."""
    total = sum(len(chips) for _, chips in workers)
    hosts = ", ".join(f"w{w} {host}" for w, (host, _) in enumerate(workers))
    new = attempts.assign(s, job_id, attempt_now, slice_name, range(total), lease_s,
                          reason=f"assigned to slice {slice_name}: {hosts}", book=False,
                          checkpoint=checkpoint)
    if new is None:
        return None
    s.execute(insert(ALLOCATIONS), [
        {"host": host, "chip": c, "job_id": job_id, "attempt": new}
        for host, chips in workers for c in chips])
    s.execute(insert(GANG), [
        {"job_id": job_id, "attempt": new, "worker": w, "host": host, "state": "assigned"}
        for w, (host, _) in enumerate(workers)])
    return new


def _current(job_id: Any, attempt: Any) -> Any:
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


def active_on_host(s: Session, host: str, assigned_before: float | None = None
                   ) -> list[tuple[int, int, int, str]]:
    """(job, attempt, worker, job state) of slice jobs holding a worker on `host`; with
    `assigned_before` (database clock), only attempts assigned before then."""
    q = select(GANG.c.job_id, GANG.c.attempt, GANG.c.worker, JOBS.c.state).join(
        JOBS, and_(JOBS.c.id == GANG.c.job_id, JOBS.c.attempt == GANG.c.attempt)).where(
        GANG.c.host == host, GANG.c.state != "ended", JOBS.c.state.in_(_ACTIVE))
    if assigned_before is not None:
        q = q.join(attempts.ATTEMPTS, and_(attempts.ATTEMPTS.c.job_id == GANG.c.job_id,
                                           attempts.ATTEMPTS.c.number == GANG.c.attempt)
                   ).where(attempts.ATTEMPTS.c.assigned_at < assigned_before)
    return [(r.job_id, r.attempt, r.worker, r.state) for r in s.execute(q).all()]


def worker_of(s: Session, job_id: int, attempt: int, host: str) -> Any | None:
    """This host's gang row with what the worker needs of the job (SPEC_COLUMNS, plus
    `gang_state`, `job_attempt`, `assigned_at` and the database clock `now`); None when
    the host has no worker in this attempt."""
    return s.execute(
        select(GANG.c.worker, GANG.c.state.label("gang_state"), *SPEC_COLUMNS,
               JOBS.c.attempt.label("job_attempt"), attempts.ATTEMPTS.c.started_over,
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


def ended(s: Session, job_id: int, attempt: int, worker: int, end: attempts.Ending
          ) -> attempts.Ending | None:
    """The worker's end (its process's, or why it could not start), once: as the job's
    stop request says it counts (worker_ending). The ending recorded, or None when the
    row had ended already."""
    job = s.execute(select(JOBS.c.attempt, JOBS.c.state, JOBS.c.stop_request, JOBS.c.reason)
                    .where(JOBS.c.id == job_id)).first()
    end = worker_ending(job, attempt, end)
    done = rows_changed(s.execute(update(GANG).where(
        _row(job_id, attempt, worker), GANG.c.state != "ended").values(
            state="ended", ended_at=db_now(), outcome=end.outcome.value,
            untouched=end.untouched, exit_code=end.exit_code, exit_signal=end.exit_signal,
            reason=end.reason[:2000], lease_expires_at=None)))
    return end if done else None


def worker_ending(job: Any, attempt: int, end: attempts.Ending) -> attempts.Ending:
    """How one worker's end counts (pure; `job`: its row's attempt, state, stop_request
    and reason, or None). A worker that ended by itself, or was fenced, says so; one
    that tpuq stopped says why, as the attempt will: stopped with the gang, or by the
    cancel, notice or time limit (attempts.effective_ending)."""
    if end.untouched or end.outcome is Outcome.LOST:
        return end
    code, sig = end.exit_code, end.exit_signal
    if job is None or job.attempt != attempt or JobState(job.state) not in ACTIVE:
        return attempts.Ending(Outcome.PREEMPTED, f"stopped: the attempt had ended; "
                               f"{end.reason}", code, sig)
    why = job.reason if job.state == JobState.PREEMPTING.value else None
    if job.stop_request in (StopRequest.GANG.value, StopRequest.BROKEN.value):
        return attempts.Ending(Outcome.PREEMPTED, f"stopped with the gang ({why or 'requested'}"
                               f"); {end.reason}", code, sig)
    return attempts.effective_ending(job.stop_request, end, why)


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
    silent_since: float | None = None  # a lost worker's last renewal: when it fell silent


def members(s: Session, job_id: int, attempt: int, margin_s: float = 0.0,
            lease_s: float = 0.0) -> list[Member]:
    """Every worker of the attempt, in worker order. A worker whose lease ran out more
    than `margin_s` ago counts as lost (its keeper has stopped its process by then); it
    fell silent at its last renewal, a lease (`lease_s`) before that."""
    now = db_now()
    rows = s.execute(select(GANG, (GANG.c.lease_expires_at < now - margin_s).label("lost"))
                     .where(GANG.c.job_id == job_id, GANG.c.attempt == attempt)
                     .order_by(GANG.c.worker)).all()
    out = []
    for r in rows:
        lost = bool(r.lost) and r.state in ("ready", "running")
        out.append(Member(r.worker, r.host, r.state, r.outcome, bool(r.untouched),
                          r.exit_code, r.exit_signal, r.reason, r.ended_at, lost,
                          r.lease_expires_at - lease_s if lost else None))
    return out


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
    """The worker whose own end stopped the gang: the earliest to end by itself (before
    any stop signal) other than by succeeding, or to fall silent (a lost one, from its
    last renewal: a host that died first is the cause, though its keeper's stop signal
    may have let the others save and exit before the loss was known)."""
    causes = [(m.ended_at or 0.0, m.worker, m) for m in ms if m.state == "ended"
              and m.untouched and m.outcome != Outcome.SUCCEEDED.value]
    causes += [(m.silent_since or 0.0, m.worker, m) for m in ms if m.lease_lost]
    return min(causes, key=lambda c: c[:2])[2] if causes else None


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


def stop_gang(s: Session, job_id: int, attempt: int, why: str, *,
              broken: bool = True) -> bool:
    """running -> preempting with the gang's stop request: every worker's next renewal
    sees it and signals its process. `broken` (a worker lost or failed): the others get
    a short stop (TPUQ_GANG_STOP_S), not the job's grace. Nothing when a stop is already
    under way (a notice's, say: its grace stands)."""
    kind = StopRequest.BROKEN if broken else StopRequest.GANG
    return transition(s, job_id, [JobState.RUNNING], JobState.PREEMPTING, attempt=attempt,
                      reason=why, actor="agent", values={"stop_request": kind.value})


def breaks_the_gang(m: Member) -> bool:
    """Whether this worker's end leaves the others unable to save together: it was lost
    or failed. One that asked to be run again (exit 75) or was preempted stopped at a
    point its peers agreed on: they get their grace."""
    return m.lease_lost or m.outcome not in (Outcome.REQUEUED.value, Outcome.PREEMPTED.value)


def close_lost(s: Session, job_id: int, attempt: int, margin_s: float) -> list[str]:
    """The attempt is ending: the rows of its lost workers (lease run out past the
    margin) end as lost, so no row reads running after its attempt. Their hosts."""
    lost = s.execute(select(GANG.c.worker, GANG.c.host).where(
        GANG.c.job_id == job_id, GANG.c.attempt == attempt,
        GANG.c.state.in_(["ready", "running"]),
        GANG.c.lease_expires_at < db_now() - margin_s)).all()
    for r in lost:
        _end_lost(s, job_id, attempt, r.worker, f"worker {r.worker} ({r.host}) lost: its "
                  "agent stopped answering")
    return [r.host for r in lost]


def _end_lost(s: Session, job_id: int, attempt: int, worker: int, why: str) -> None:
    s.execute(update(GANG).where(_row(job_id, attempt, worker), GANG.c.state != "ended")
              .values(state="ended", ended_at=db_now(), outcome=Outcome.LOST.value,
                      untouched=True, reason=why, lease_expires_at=None))


def stale(s: Session, margin_s: float) -> list[Any]:
    """Rows of attempts that are over and whose workers nobody will report on (their
    agents died too, or never got them ready): not ended, and no lease left past the
    margin. The reaper reads them each pass and ends them (sweep)."""
    over = ~_current(GANG.c.job_id, GANG.c.attempt)
    return list(s.execute(select(GANG.c.job_id, GANG.c.attempt, GANG.c.worker, GANG.c.host,
                                 GANG.c.state).where(
        GANG.c.state != "ended", over,
        or_(GANG.c.lease_expires_at.is_(None),
            GANG.c.lease_expires_at < db_now() - margin_s))).all())


def sweep(s: Session, stale: Sequence[Any]) -> list[str]:
    """End the `stale` rows, as lost or as never started; the hosts that stopped
    answering (a lease ran out)."""
    silent = []
    for r in stale:
        if r.state == "assigned":
            _end_lost(s, r.job_id, r.attempt, r.worker, f"worker {r.worker} ({r.host}) "
                      "never got ready: the attempt ended first")
            continue
        _end_lost(s, r.job_id, r.attempt, r.worker, f"worker {r.worker} ({r.host}) lost: "
                  "its agent stopped answering")
        silent.append(r.host)
    return silent


def stop_reason(m: Member) -> str:
    """Why the gang is stopped, for the job's event when one worker's end stops it."""
    if m.lease_lost:
        return f"worker {m.worker} ({m.host}) lost its agent: stopping the gang"
    return f"worker {m.worker} ({m.host}) ended ({m.reason or m.outcome}): stopping the gang"
