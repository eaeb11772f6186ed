"""The life of an attempt: assign, start, renew, finish, and recovery of lost ones.

The attempt number is the fencing token: every write below names (job, attempt, host),
so a stale doorbell, a duplicate delivery or a host that lost its lease changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from tpuq.state.clock import db_now
from tpuq.state.models import Allocation, Attempt, Job
from tpuq.state.states import ACTIVE, NOT_CHARGED, JobState, Outcome
from tpuq.state.transitions import transition

Q, A, R, P = JobState.QUEUED, JobState.ASSIGNED, JobState.RUNNING, JobState.PREEMPTING
AGENT = "agent"


def assign(s: Session, job_id: int, attempt_now: int, host: str, chips: Sequence[int],
           lease_s: float) -> int | None:
    """queued -> assigned with attempt+1, chip rows and a lease, in the caller's transaction.

    Returns the new attempt number, or None when the job changed meanwhile. A chip that is
    already booked makes the INSERT fail (primary key): the caller's transaction rolls back.
    """
    new = attempt_now + 1
    ok = transition(s, job_id, [Q], A, attempt=attempt_now, actor="scheduler",
                    reason=f"assigned to {host} chips {','.join(map(str, chips))}",
                    values={"attempt": new, "host": host, "stop_request": None,
                            "lease_expires_at": db_now() + lease_s})
    if not ok:
        return None
    if chips:
        s.execute(insert(Allocation), [
            {"host": host, "chip": c, "job_id": job_id, "attempt": new} for c in chips
        ])
    s.execute(insert(Attempt).values(job_id=job_id, number=new, host=host, chips=list(chips),
                                     assigned_at=db_now()))
    return new


def start(s: Session, job_id: int, attempt: int, host: str, *, boot_id: str, log_path: str,
          lease_s: float) -> bool:
    """assigned -> running, before the process exists.

    False means a stale or duplicate doorbell, or a cancel that came first: do nothing.
    Recording the boot id here (not after the spawn) lets a restarted agent recognise
    an attempt of its own boot even if it died between this commit and the spawn.
    """
    ok = transition(s, job_id, [A], R, attempt=attempt, host=host, actor=AGENT,
                    reason=f"starting on {host}",
                    values={"lease_expires_at": db_now() + lease_s})
    if ok:
        _attempt_row(s, job_id, attempt, boot_id=boot_id, log_path=log_path, started_at=db_now())
    return ok


def record_process(s: Session, job_id: int, attempt: int, pid: int, proc_start: int | None) -> None:
    """The spawned process, with its start time so a recycled pid is never mistaken for it."""
    _attempt_row(s, job_id, attempt, pid=pid, proc_start=proc_start)


def _attempt_row(s: Session, job_id: int, number: int, **values: object) -> None:
    s.execute(update(Attempt).where(Attempt.job_id == job_id, Attempt.number == number)
              .values(**values))


@dataclass(frozen=True)
class Lease:
    held: bool
    stop_request: str | None = None


def renew(s: Session, job_id: int, attempt: int, host: str, lease_s: float) -> Lease:
    """Extend the lease; held=False means this attempt was fenced out: kill it now."""
    row = s.execute(
        update(Job)
        .where(Job.id == job_id, Job.attempt == attempt, Job.host == host,
               Job.state.in_([A.value, R.value, P.value]))
        .values(lease_expires_at=db_now() + lease_s)
        .returning(Job.stop_request)
    ).first()
    return Lease(False) if row is None else Lease(True, row.stop_request)


def record_progress(s: Session, job_id: int, attempt: int, step: int, at: float) -> None:
    _attempt_row(s, job_id, attempt, checkpoint_step=step, checkpoint_at=at)


def release_chips(s: Session, job_id: int, attempt: int) -> None:
    s.execute(delete(Allocation).where(Allocation.job_id == job_id, Allocation.attempt == attempt))


@dataclass(frozen=True)
class Ending:
    outcome: Outcome
    reason: str
    exit_code: int | None = None
    exit_signal: int | None = None


# what finish() needs of the job: a plain row, not an ORM object (it runs once per job)
_FINISH_COLUMNS = (Job.state, Job.attempt, Job.host, Job.stop_request, Job.reason, Job.failures,
                   Job.max_retries, Job.preemptions, Job.requeue_on_preempt)


def finish(s: Session, job_id: int, attempt: int, host: str | None, end: Ending,
           retry_backoff_s: float = 10.0, actor: str = AGENT) -> JobState | None:
    """End an attempt and move the job where the outcome says; None if fenced out."""
    job = s.execute(select(*_FINISH_COLUMNS).where(Job.id == job_id)).first()
    if job is None or job.attempt != attempt or JobState(job.state) not in ACTIVE:
        return None
    if host is not None and job.host != host:
        return None
    end = effective_ending(job.stop_request, end,
                           job.reason if job.state == JobState.PREEMPTING.value else None)
    to, values, reason = _next_state(job, end, retry_backoff_s)
    ok = transition(s, job_id, [JobState(job.state)], to, attempt=attempt, host=host, reason=reason,
                    actor=actor, values=values)
    if not ok:
        return None
    _attempt_row(s, job_id, attempt, ended_at=db_now(), outcome=end.outcome.value,
                 exit_code=end.exit_code, exit_signal=end.exit_signal, reason=end.reason)
    release_chips(s, job_id, attempt)
    return to


# A stop someone asked for decides how the attempt counts, whatever the exit code was:
# a job that saves and exits 0 after its preemption notice still has work left to do.
STOP_OUTCOME = {"cancel": Outcome.CANCELLED, "preempt": Outcome.PREEMPTED,
                "timeout": Outcome.TIMEOUT}
STOP_WORDS = {"cancel": "cancelled", "preempt": "preempted", "timeout": "time limit reached"}


def effective_ending(stop_request: str | None, end: Ending, why: str | None = None) -> Ending:
    """`why`: the reason recorded with the stop request (e.g. the host's notice)."""
    if stop_request not in STOP_OUTCOME:
        return end
    return Ending(STOP_OUTCOME[stop_request],
                  f"{STOP_WORDS[stop_request]} ({why or 'requested'}); {end.reason}",
                  end.exit_code, end.exit_signal)


def _next_state(job: Any, end: Ending, backoff_s: float) -> tuple[JobState, dict, str]:
    values: dict[str, object] = {"exit_code": end.exit_code, "exit_signal": end.exit_signal,
                                 "lease_expires_at": None, "stop_request": None}
    o = end.outcome
    if o is Outcome.FAILED:
        if job.failures < job.max_retries:
            delay = backoff_s * (2 ** job.failures)
            values.update(failures=job.failures + 1, not_before=db_now() + delay)
            return Q, values, (f"{end.reason}; retry {job.failures + 1}/{job.max_retries} "
                               f"in {delay:g}s")
        values.update(failures=job.failures + 1, ended_at=db_now())
        return JobState.FAILED, values, end.reason
    if o in NOT_CHARGED:
        if o is Outcome.PREEMPTED:
            values["preemptions"] = job.preemptions + 1
            if not job.requeue_on_preempt:
                values["ended_at"] = db_now()
                return JobState.FAILED, values, f"{end.reason}; not requeued (--no-requeue)"
        # a host problem must not spin: the same job on the same broken host, 1000x a second
        values["not_before"] = db_now() + backoff_s if o is Outcome.HOST_ERROR else None
        return Q, values, f"{end.reason}; requeued"
    values["ended_at"] = db_now()
    target = {Outcome.SUCCEEDED: JobState.SUCCEEDED, Outcome.CANCELLED: JobState.CANCELLED,
              Outcome.TIMEOUT: JobState.TIMEOUT}[o]
    return target, values, end.reason


def requeue_expired(s: Session, limit: int = 100) -> list[int]:
    """The reaper: active jobs whose lease ran out (their host went silent) are requeued."""
    rows = s.execute(
        select(Job.id, Job.attempt, Job.host)
        .where(Job.state.in_([A.value, R.value, P.value]), Job.lease_expires_at < db_now())
        .limit(limit)
    ).all()
    done = []
    for r in rows:
        end = Ending(Outcome.LOST, f"lease expired: host {r.host} stopped answering")
        if finish(s, r.id, r.attempt, r.host, end, actor="reaper") is not None:
            done.append(r.id)
    return done


def requeue_rebooted(s: Session, host: str, boot_id: str) -> list[int]:
    """At agent start: attempts on this host from an earlier boot are over; requeue now."""
    rows = s.execute(
        select(Job.id, Job.attempt, Attempt.boot_id)
        .join(Attempt, (Attempt.job_id == Job.id) & (Attempt.number == Job.attempt))
        .where(Job.host == host, Job.state.in_([A.value, R.value, P.value]))
    ).all()
    done = []
    for r in rows:
        if r.boot_id is not None and r.boot_id == boot_id:
            continue  # same boot: maybe still running as an orphan; the supervisor decides
        why = "host rebooted" if r.boot_id else "agent restarted before the job started"
        end = Ending(Outcome.PREEMPTED, why) if r.boot_id else Ending(Outcome.LOST, why)
        if finish(s, r.id, r.attempt, host, end, actor="agent") is not None:
            done.append(r.id)
    return done


def active_on_host(s: Session, host: str) -> list[tuple[Job, Attempt]]:
    rows = s.execute(
        select(Job, Attempt)
        .join(Attempt, (Attempt.job_id == Job.id) & (Attempt.number == Job.attempt))
        .where(Job.host == host, Job.state.in_([A.value, R.value, P.value]))
    ).all()
    return [(r[0], r[1]) for r in rows]
