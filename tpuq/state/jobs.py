"""What people do to jobs: submit, hold, release, cancel, preempt, resubmit.

Every state change goes through transitions.transition(); this module only decides
which change a user command means.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Row, Table, insert, select
from sqlalchemy import update as update_
from sqlalchemy.orm import Session

from tpuq.spec import SPEC_FIELDS, JobSpec, format_duration
from tpuq.state import admission, queries
from tpuq.state.attempts import release_chips
from tpuq.state.clock import db_now
from tpuq.state.db import rows_changed
from tpuq.state.models import Job, JobEvent
from tpuq.state.states import (
    ASSIGNED,
    HELD,
    PREEMPTING,
    QUEUED,
    TERMINAL,
    JobState,
    StopRequest,
)
from tpuq.state.transitions import transition

JOBS = cast(Table, Job.__table__)


def submit(s: Session, spec: JobSpec, actor: str | None = None, held: bool = False) -> int:
    """Insert a new job (queued, or held) and its first event; returns its id.

    Every way into the queue ends here: the spec is validated (spec.py) before anything
    is written. SpecError for a bad spec, and when registered hosts exist and none can
    give the chips asked for.
    """
    spec.validate()
    admission.check_shape(s, spec)
    state = HELD if held else QUEUED
    values = spec.to_dict()
    job_id = s.execute(
        insert(Job)
        .values(
            **values,
            workers=spec.workers,
            state=state.value,
            failures=0,
            preemptions=0,
            attempt=0,
            submitted_at=db_now(),
            updated_at=db_now(),
        )
        .returning(Job.id)
    ).scalar_one()
    s.execute(
        insert(JobEvent).values(
            job_id=job_id, at=db_now(), from_state=None, to_state=state.value, attempt=0,
            reason=f"resubmitted from job {spec.resubmit_of}" if spec.resubmit_of else "submitted",
            actor=actor or spec.owner,
        )
    )
    return int(job_id)


def submit_array(s: Session, specs: Sequence[JobSpec], indices: Sequence[int],
                 throttle: int | None, actor: str | None = None, held: bool = False
                 ) -> list[int]:
    """Insert the tasks of an array in this one transaction (bulk statements, not a
    loop of submits); the first task's id is the array's id. Returns the tasks' ids."""
    for spec in specs:
        spec.validate()
    admission.check_shape(s, specs[0])  # every task has the same shape
    state = HELD if held else QUEUED
    now = float(s.execute(select(db_now())).scalar_one())  # one value for every row
    rows = [{**spec.to_dict(), "workers": spec.workers, "state": state.value, "failures": 0, "preemptions": 0,
             "attempt": 0, "submitted_at": now, "updated_at": now, "array_index": i,
             "array_throttle": throttle} for spec, i in zip(specs, indices, strict=True)]
    ids = [int(i) for i in s.scalars(insert(Job).returning(Job.id, sort_by_parameter_order=True),
                                     rows)]
    s.execute(update_(Job).where(Job.id.in_(ids)).values(array_id=ids[0]))
    s.execute(insert(JobEvent), [
        {"job_id": j, "at": now, "from_state": None, "to_state": state.value, "attempt": 0,
         "reason": f"submitted (array {ids[0]}, task {i})", "actor": actor or specs[0].owner}
        for j, i in zip(ids, indices, strict=True)])
    return ids


@dataclass(frozen=True)
class Result:
    """What a user command did to one job, in words."""

    job_id: int
    ok: bool
    message: str


_CURRENT = tuple(JOBS.c[n] for n in ("id", "state", "attempt", "owner", "stop_request",
                                        "stop_signal", "grace_s"))


def _current(s: Session, job_id: int) -> Row[Any] | None:
    """What a user command needs of a job (never its env: see queries.py)."""
    return s.execute(select(*_CURRENT).where(JOBS.c.id == job_id)).first()


def owner_of(s: Session, job_id: int) -> str | None:
    """The job's owner, or None when there is no such job."""
    return s.scalar(select(JOBS.c.owner).where(JOBS.c.id == job_id))


def update(s: Session, job_id: int, actor: str, *, priority: int | None = None,
           time_limit_s: float | None = None) -> Result:
    """Change a job that has not started: its priority, its time limit."""
    values: dict[str, Any] = {}
    if priority is not None:
        values["priority"] = priority
    if time_limit_s is not None:
        values["time_limit_s"] = time_limit_s
    job = _current(s, job_id)
    if job is None:
        return Result(job_id, False, "does not exist")
    if not values:
        return Result(job_id, False, "nothing to change (--priority, --time)")
    done = s.execute(update_(Job).where(Job.id == job_id, Job.state.in_([QUEUED.value, HELD.value]))
                     .values(**values, updated_at=db_now()))
    if not rows_changed(done):
        return Result(job_id, False, f"is {job.state}: only a queued or held job changes")
    what = ", ".join(f"time_limit {format_duration(v)}" if k == "time_limit_s" else f"{k} {v}"
                     for k, v in values.items())
    s.execute(insert(JobEvent).values(job_id=job_id, at=db_now(), from_state=job.state,
                                      to_state=job.state, attempt=job.attempt,
                                      reason=f"updated: {what}", actor=actor))
    return Result(job_id, True, f"updated: {what}")


def cancel(s: Session, job_id: int, actor: str) -> Result:
    """Queued/held jobs end at once; active ones get their stop signal via the agent."""
    return request_stop(s, job_id, actor, StopRequest.CANCEL)


def preempt(s: Session, job_id: int, actor: str) -> Result:
    """Stop a running job the way host maintenance would: signal, grace, requeue."""
    return request_stop(s, job_id, actor, StopRequest.PREEMPT)


def request_stop(s: Session, job_id: int, actor: str, kind: StopRequest,
                 why: str | None = None) -> Result:
    job = _current(s, job_id)
    if job is None:
        return Result(job_id, False, "does not exist")
    state = JobState(job.state)
    if state in TERMINAL:
        return Result(job_id, False, f"already {state.value}")
    if state in (QUEUED, HELD):
        if kind is StopRequest.PREEMPT:
            return Result(job_id, False, f"is {state.value}, not running")
        ok = transition(s, job_id, [state], JobState.CANCELLED, reason=f"cancelled by {actor}",
                        actor=actor, values={"ended_at": db_now()})
        return Result(job_id, ok, "cancelled" if ok else "changed meanwhile, try again")
    if state is ASSIGNED and kind is StopRequest.CANCEL:
        # not started yet: the agent's assigned->running compare-and-set will now fail
        ok = transition(s, job_id, [ASSIGNED], JobState.CANCELLED, attempt=job.attempt,
                        reason=f"cancelled by {actor}", actor=actor, values={"ended_at": db_now()})
        if ok:
            release_chips(s, job_id, job.attempt)
        return Result(job_id, ok, "cancelled" if ok else "changed meanwhile, try again")
    if state is ASSIGNED:
        return Result(job_id, False, "is starting; preempt it once it runs")
    if state is PREEMPTING and job.stop_request == StopRequest.CANCEL.value:
        return Result(job_id, True, "already stopping")
    ok = transition(s, job_id, [state], PREEMPTING, attempt=job.attempt,
                    reason=why or f"{kind.value} requested by {actor}", actor=actor,
                    values={"stop_request": kind.value})
    return Result(job_id, ok, f"stopping (signal {job.stop_signal}, grace {job.grace_s:g}s)")


def hold(s: Session, job_id: int, actor: str) -> Result:
    ok = transition(s, job_id, [QUEUED], HELD, reason=f"held by {actor}", actor=actor)
    return Result(job_id, ok, "held" if ok else _why_not(s, job_id, JobState.QUEUED))


def release(s: Session, job_id: int, actor: str) -> Result:
    ok = transition(s, job_id, [HELD], QUEUED, reason=f"released by {actor}", actor=actor)
    return Result(job_id, ok, "released" if ok else _why_not(s, job_id, JobState.HELD))


def _why_not(s: Session, job_id: int, needed: str) -> str:
    job = _current(s, job_id)
    if job is None:
        return "does not exist"
    return f"is {job.state}, not {needed}"


def resubmit(s: Session, job_ids: Iterable[int], owner: str,
             owner_env: Mapping[str, str],
             notify: tuple[str | None, str | None] = (None, None)) -> list[Result]:
    """New jobs from earlier specs, each linked to its original and owned by `owner`.

    The environment captured from the original owner's shell is theirs: a job of
    someone else's is resubmitted with `owner_env` (what the resubmitter's shell gives).
    """
    results = []
    for job_id in job_ids:
        spec = spec_of(s, job_id)
        if spec is None:
            results.append(Result(job_id, False, "does not exist"))
            continue
        if spec.owner != owner:
            spec.env, spec.owner = dict(owner_env), owner
        spec.resubmit_of = job_id
        spec.notify, spec.notify_to = notify
        new_id = submit(s, spec, actor=owner)
        results.append(Result(new_id, True, f"queued, resubmitting job {job_id}"))
    return results


_SPEC_COLUMNS = tuple(JOBS.c[f] for f in SPEC_FIELDS if f not in queries.SECRET_COLUMNS)


def spec_of(s: Session, job_id: int) -> JobSpec | None:
    """The spec a job was submitted with (its env as this session may see it)."""
    row = s.execute(select(*_SPEC_COLUMNS).where(JOBS.c.id == job_id)).first()
    if row is None:
        return None
    env = queries.envs(s, [job_id]).get(job_id, {})
    return JobSpec(**{c.name: getattr(row, c.name) for c in _SPEC_COLUMNS}, env=env)


def failed_since(s: Session, since: float | None) -> list[int]:
    """Failed (or timed-out) jobs that ended after `since` and were not resubmitted yet."""
    resubmitted = select(Job.resubmit_of).where(Job.resubmit_of.is_not(None))
    q = select(Job.id).where(
        Job.state.in_([JobState.FAILED.value, JobState.TIMEOUT.value]),
        Job.id.not_in(resubmitted),
    )
    if since is not None:
        q = q.where(Job.ended_at >= since)
    return list(s.scalars(q.order_by(Job.id)))
