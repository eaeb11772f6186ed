"""Job dependencies (`--after`, `--after-any`): what a queued job still waits for, and
the dependents a failed dependency dooms.

A dependent whose "ok" dependency ended otherwise (failed, cancelled, timeout) can never
run: the scheduler's pass cancels it, with the reason, before it plans (one place for
every way a job ends; a chain is cancelled link by link, a pass each).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Table, func, insert, or_, select
from sqlalchemy.orm import Session

from tpuq.spec import MAX_ID, SpecError
from tpuq.state import direct
from tpuq.state.clock import db_now
from tpuq.state.models import Job, JobDep
from tpuq.state.states import TERMINAL, JobState
from tpuq.state.transitions import transition

OK, ANY = "ok", "any"
MAX_DEPS = 10_000  # jobs and tasks one submit names
MAX_DEP_ROWS = 100_000  # links one submit writes (tasks x the jobs they wait for)
DEPS = cast(Table, JobDep.__table__)
_ENDED = tuple(s.value for s in TERMINAL)
_FAILED = tuple(s.value for s in TERMINAL if s is not JobState.SUCCEEDED)
_WAITING = (JobState.QUEUED.value, JobState.HELD.value)

# Every scheduling pass reads the open links once, for both of its uses (what a queued
# job still waits for; which waiting jobs a failed dependency dooms), as a Core statement
# built once (an ORM `aliased()` query built per pass cost more than the rest of the
# pass's reads together). A pass runs it after it read the queued jobs: under READ
# COMMITTED a job committed in between has its links visible too (they commit with it).
_JOBS = cast(Table, Job.__table__)
_DEP, _WAITER = _JOBS.alias("dep"), _JOBS.alias("waiter")
OPEN_LINKS = (select(DEPS.c.job_id, DEPS.c.after_id, DEPS.c.kind,
                     _WAITER.c.state.label("waiting"), _DEP.c.state, _DEP.c.array_id,
                     _DEP.c.array_index)
              .join(_WAITER, _WAITER.c.id == DEPS.c.job_id)
              .join(_DEP, _DEP.c.id == DEPS.c.after_id)
              .where(or_(*(_WAITER.c.state == w for w in _WAITING)),
                     _DEP.c.state != JobState.SUCCEEDED.value)
              .order_by(DEPS.c.job_id, DEPS.c.after_id))


@dataclass
class Open:
    """The links of waiting jobs whose dependency has not succeeded, read once a pass."""
    # queued job -> the jobs it still waits for (only jobs that wait for any)
    unmet: dict[int, tuple[int, ...]] = field(default_factory=dict)
    # of those, the array tasks: job -> (array id, index), for the words of a reason
    tasks: dict[int, tuple[int, int]] = field(default_factory=dict)
    # waiting (queued or held) job -> (its first "ok" dependency that ended otherwise,
    # that one's state): it can never run
    doomed: dict[int, tuple[int, str]] = field(default_factory=dict)


def resolve(s: Session, ids: Sequence[int], tasks: Sequence[Sequence[int]],
            option: str = "--after") -> list[int]:
    """The jobs a dependency names, as SLURM reads them: an array's id (its first
    task's) means every task of it; `[array, index]` (`ID_N`) one task; any other id that
    one job. SpecError for a job or task that does not exist."""
    if len(ids) + len(tasks) > MAX_DEPS:
        raise SpecError(f"{option}: at most {MAX_DEPS} jobs")
    if not all(_is_id(i) for i in ids) or \
            not all(len(r) == 2 and _is_id(r[0]) and _is_index(r[1]) for r in tasks):
        raise SpecError(f"{option}: a job id (12), an array's (54) or a task's (54_2)")
    out: set[int] = set()
    if ids:
        members = s.execute(select(Job.array_id, Job.id).where(Job.array_id.in_(ids))).all()
        by_array: dict[int, list[int]] = defaultdict(list)
        for member in members:
            by_array[int(member.array_id)].append(int(member.id))
        plain = [i for i in ids if i not in by_array]
        known = set(s.scalars(select(Job.id).where(Job.id.in_(plain)))) if plain else set()
        missing = sorted(set(plain) - known)
        if missing:
            raise SpecError(f"{option}: no job {', '.join(map(str, missing))}")
        out |= known
        for members_of in by_array.values():
            out |= set(members_of)
    for ref in tasks:
        array_id, index = ref
        task: int | None = s.scalar(select(Job.id).where(Job.array_id == array_id,
                                             Job.array_index == index))
        if task is None:
            raise SpecError(f"{option}: no task {array_id}_{index} (array {array_id} has "
                            f"no index {index})")
        out.add(int(task))
    return sorted(out)


def _is_id(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_ID


def _is_index(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_ID


def add(s: Session, job_ids: Sequence[int], after: Sequence[int],
        after_any: Sequence[int]) -> None:
    """Record what each of `job_ids` (one job, or the tasks of a new array) waits for:
    jobs already resolved (`resolve`); SpecError for a job that would wait for itself."""
    wanted = {**{a: ANY for a in after_any}, **{a: OK for a in after}}  # ok wins
    if not wanted:
        return
    if set(job_ids) & set(wanted):
        raise SpecError("a job cannot wait for itself")
    if len(job_ids) * len(wanted) > MAX_DEP_ROWS:
        raise SpecError(f"{len(job_ids)} tasks each waiting for {len(wanted)} jobs: at most "
                        f"{MAX_DEP_ROWS} such links in one submit (wait for fewer, or "
                        "chain through one job)")
    s.execute(insert(JobDep), [{"job_id": j, "after_id": a, "kind": k}
                               for j in job_ids for a, k in sorted(wanted.items())])


def of_job(s: Session, job_id: int) -> list[dict[str, object]]:
    """What a job waits for, as `show` says it: whole arrays as one entry (`array`: its
    id, `tasks`: how many), single tasks as `ID_N`, other jobs by id; each with its
    kind ("ok": must succeed, "any": must end) and how many of its jobs are still unmet."""
    rows = s.execute(select(DEPS.c.after_id, DEPS.c.kind, _DEP.c.state, _DEP.c.array_id,
                            _DEP.c.array_index)
                     .join(_DEP, _DEP.c.id == DEPS.c.after_id)
                     .where(DEPS.c.job_id == job_id).order_by(DEPS.c.after_id)).all()
    arrays = {r.array_id for r in rows if r.array_id is not None}
    sizes = dict(s.execute(select(Job.array_id, func.count()).where(Job.array_id.in_(arrays))
                           .group_by(Job.array_id)).all()) if arrays else {}
    grouped: dict[tuple[int, str], list[Any]] = defaultdict(list)
    for r in rows:
        if r.array_id is not None:
            grouped[(r.array_id, r.kind)].append(r)
    out: list[dict[str, object]] = []
    told: set[tuple[int, str]] = set()  # whole arrays already said (rows come by id)
    for r in rows:
        key = (r.array_id, r.kind)
        members = grouped.get(key, [])
        if r.array_id is not None and len(members) > 1 and len(members) == sizes.get(
                r.array_id):
            if key not in told:
                told.add(key)
                out.append({"array": r.array_id, "tasks": len(members), "kind": r.kind,
                            "unmet": sum(_unmet(m.kind, m.state) for m in members),
                            "says": f"array {r.array_id} (all {len(members)} tasks)"})
            continue
        unmet = int(_unmet(r.kind, r.state))
        if r.array_id is not None:
            out.append({"job": r.after_id, "task": f"{r.array_id}_{r.array_index}",
                        "kind": r.kind, "unmet": unmet, "state": r.state,
                        "says": f"task {r.array_id}_{r.array_index} (job {r.after_id}), "
                                f"{r.state}"})
        else:
            out.append({"job": r.after_id, "kind": r.kind, "unmet": unmet, "state": r.state,
                        "says": f"job {r.after_id}, {r.state}"})
    return out


def _unmet(kind: str, state: str) -> bool:
    return state != JobState.SUCCEEDED.value if kind == OK else state not in _ENDED


def read_open(s: Session, found: list[Any] | None = None) -> Open:
    """What waiting jobs still wait for, and which of them can never run (`Open`);
    `found`: the rows of OPEN_LINKS, read already (with others, snapshot.read)."""
    unmet: dict[int, list[int]] = defaultdict(list)
    out = Open()
    for job_id, after_id, kind, waiting, state, array_id, index in \
            (direct.rows(s, OPEN_LINKS) if found is None else found):
        if kind == OK and state in _FAILED:
            out.doomed.setdefault(job_id, (after_id, state))
        if waiting == JobState.QUEUED.value and _unmet(kind, state):
            unmet[job_id].append(after_id)
            if array_id is not None:
                out.tasks[after_id] = (int(array_id), int(index))
    out.unmet = {j: tuple(a) for j, a in unmet.items()}  # in after_id order, as read
    return out


def cancel_doomed(s: Session, doomed: dict[int, tuple[int, str]]) -> list[int]:
    """Cancel the waiting jobs `read_open` found doomed (an "ok" dependency ended without
    succeeding); the ones cancelled, in id order."""
    cancelled: list[int] = []
    for job_id, (after_id, state) in sorted(doomed.items()):
        if transition(s, job_id, [JobState.QUEUED, JobState.HELD], JobState.CANCELLED,
                      reason=f"dependency job {after_id} {state}", actor="tpuq",
                      values={"ended_at": db_now()}):
            cancelled.append(job_id)
    return cancelled
