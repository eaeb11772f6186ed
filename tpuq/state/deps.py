"""Job dependencies (`--after`, `--after-any`): what a queued job still waits for, and
the dependents a failed dependency dooms.

A dependent whose "ok" dependency ended otherwise (failed, cancelled, timeout) can never
run: the scheduler's pass cancels it, with the reason, before it plans (one place for
every way a job ends; a chain is cancelled link by link, a pass each).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import cast

from sqlalchemy import Table, and_, insert, or_, select
from sqlalchemy.orm import Session

from tpuq.spec import SpecError
from tpuq.state.clock import db_now
from tpuq.state.models import Job, JobDep
from tpuq.state.states import TERMINAL, JobState
from tpuq.state.transitions import CHUNK, transition

OK, ANY = "ok", "any"
DEPS = cast(Table, JobDep.__table__)
_ENDED = tuple(s.value for s in TERMINAL)
_FAILED = tuple(s.value for s in TERMINAL if s is not JobState.SUCCEEDED)
_WAITING = (JobState.QUEUED.value, JobState.HELD.value)

# Both run every scheduling pass: Core statements built once (an ORM `aliased()` query
# built per pass cost more than the rest of the pass's reads together)
_JOBS = cast(Table, Job.__table__)
_DEP, _WAITER = _JOBS.alias("dep"), _JOBS.alias("waiter")
_UNMET = (select(DEPS.c.job_id, DEPS.c.after_id)
          .join(_WAITER, _WAITER.c.id == DEPS.c.job_id)
          .join(_DEP, _DEP.c.id == DEPS.c.after_id)
          .where(_WAITER.c.state == JobState.QUEUED.value,
                 or_(and_(DEPS.c.kind == OK, _DEP.c.state != JobState.SUCCEEDED.value),
                     and_(DEPS.c.kind == ANY, _DEP.c.state.not_in(_ENDED)))))
_DOOMED = (select(DEPS.c.job_id, _DEP.c.id, _DEP.c.state)
           .join(_WAITER, _WAITER.c.id == DEPS.c.job_id)
           .join(_DEP, _DEP.c.id == DEPS.c.after_id)
           .where(DEPS.c.kind == OK, _WAITER.c.state.in_(_WAITING),
                  _DEP.c.state.in_(_FAILED))
           .order_by(DEPS.c.job_id))


MAX_EDGES = 100_000  # dependencies one submit may record (tasks x jobs waited for)


def add(s: Session, job_id: int, after: Sequence[int], after_any: Sequence[int]) -> None:
    """Record what `job_id` waits for; SpecError for a job that does not exist."""
    add_many(s, [job_id], after, after_any)


def add_many(s: Session, job_ids: Sequence[int], after: Sequence[int],
             after_any: Sequence[int]) -> None:
    """Record that each of `job_ids` (an array's tasks) waits for the same jobs: checked
    once, written in one insert. SpecError for a job that does not exist, and for more
    than MAX_EDGES dependencies."""
    wanted = {**{a: ANY for a in after_any}, **{a: OK for a in after}}  # ok wins
    if not wanted:
        return
    if len(wanted) * len(job_ids) > MAX_EDGES:
        raise SpecError(f"--after: {len(job_ids)} tasks waiting for {len(wanted)} jobs make "
                        f"{len(wanted) * len(job_ids)} dependencies; one submit records at "
                        f"most {MAX_EDGES}")
    if set(job_ids) & set(wanted):
        raise SpecError("a job cannot wait for itself")
    known: set[int] = set()
    ids = list(wanted)
    for start in range(0, len(ids), CHUNK):
        known.update(s.scalars(select(Job.id).where(Job.id.in_(ids[start:start + CHUNK]))))
    missing = sorted(set(wanted) - known)
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
        raise SpecError(f"--after: no job {shown}")
    s.execute(insert(JobDep), [{"job_id": j, "after_id": a, "kind": k}
                               for j in job_ids for a, k in sorted(wanted.items())])


def unmet(s: Session) -> dict[int, tuple[int, ...]]:
    """Queued job -> the jobs it still waits for (only jobs that wait for any)."""
    out: dict[int, list[int]] = defaultdict(list)
    for job_id, after_id in s.execute(_UNMET):
        out[job_id].append(after_id)
    return {j: tuple(sorted(a)) for j, a in out.items()}


def cancel_doomed(s: Session) -> list[int]:
    """Cancel waiting jobs whose "ok" dependency ended without succeeding."""
    cancelled: list[int] = []
    for job_id, after_id, state in s.execute(_DOOMED).all():
        if job_id in cancelled:
            continue
        if transition(s, job_id, [JobState.QUEUED, JobState.HELD], JobState.CANCELLED,
                      reason=f"dependency job {after_id} {state}", actor="tpuq",
                      values={"ended_at": db_now()}):
            cancelled.append(job_id)
    return cancelled
