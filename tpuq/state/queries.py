"""Read-only views for the CLI: job lists, one job's story, hosts with what runs there.

Plain column selects, never a job's `env` with the rest: on PostgreSQL a user's login
role may not read that column (secrets from its owner's shell); `envs` reads it through
the `job_env` view, which shows values to the owner and admins only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

from sqlalchemy import Row, Table, and_, column, not_, or_, select, table
from sqlalchemy.orm import Session

from tpuq.state.clock import db_now
from tpuq.state.models import Allocation, Attempt, Host, Job, JobEvent, Meta
from tpuq.state.states import ACTIVE, TERMINAL, WAITING, JobState

JOBS = cast(Table, Job.__table__)
# every column of a job but its environment
# the job columns a query for people never reads whole: env (envs() below shows it as
# the session may see it) and notify_to (it may hold a token: users cannot read it)
SECRET_COLUMNS = ("env", "notify_to")
JOB_COLUMNS = tuple(c for c in JOBS.c if c.name not in SECRET_COLUMNS)
_JOB_ENV_VIEW = table("job_env", column("id"), column("env"))


FOLD_MOST = 900  # arrays folded in one listing: their first tasks' ids are one IN list
_WAITING_TASK = and_(JOBS.c.array_id.is_not(None),
                     JOBS.c.state.in_([st.value for st in WAITING]))


def list_jobs(s: Session, *, states: Sequence[str] | None = None, owner: str | None = None,
              team: str | None = None, recent: int = 20,
              folded: dict[int, list[int]] | None = None) -> list[Row[Any]]:
    """Waiting and active jobs, plus the `recent` newest finished ones. `folded`: filled
    with each array's first waiting task (per state) -> the indices of all of them, and
    of those tasks only the first is read whole (`status`'s table: one row per array)."""
    q = select(*JOB_COLUMNS)
    if owner:
        q = q.where(JOBS.c.owner == owner)
    if team:
        q = q.where(JOBS.c.team == team)
    if folded is not None:
        rows = _fold(s, q.with_only_columns(
            JOBS.c.id, JOBS.c.array_id, JOBS.c.state, JOBS.c.array_index), states)
        if 0 < len(rows) <= FOLD_MOST:  # else every task, as without folding
            folded.update(rows)
            q = q.where(or_(not_(_WAITING_TASK), JOBS.c.id.in_(list(folded))))
    if states:
        return list(s.execute(q.where(JOBS.c.state.in_(states)).order_by(JOBS.c.id)))
    live = [st.value for st in (*ACTIVE, *WAITING)]
    open_jobs = list(s.execute(q.where(JOBS.c.state.in_(live)).order_by(JOBS.c.id)))
    done = list(s.execute(q.where(JOBS.c.state.not_in(live)).order_by(JOBS.c.id.desc())
                          .limit(recent)))
    return sorted(open_jobs + done, key=lambda j: j.id)


def _fold(s: Session, q: Any, states: Sequence[str] | None) -> dict[int, list[int]]:
    q = q.where(_WAITING_TASK)
    if states:
        q = q.where(JOBS.c.state.in_(states))
    firsts: dict[tuple[int, str], int] = {}
    out: dict[int, list[int]] = {}
    for job_id, array_id, state, index in s.execute(q.order_by(JOBS.c.id)):
        first = firsts.setdefault((array_id, state), job_id)
        out.setdefault(first, []).append(index)
    return out


def job(s: Session, job_id: int) -> Row[Any] | None:
    return s.execute(select(*JOB_COLUMNS).where(JOBS.c.id == job_id)).first()


def envs(s: Session, job_ids: Iterable[int]) -> dict[int, dict[str, str]]:
    """Each job's environment as this session may see it (PostgreSQL: through the view
    that hides other owners' values; SQLite has no login roles: the file is the wall)."""
    ids = list(job_ids)
    if s.get_bind().dialect.name == "postgresql":
        q = select(_JOB_ENV_VIEW.c.id, _JOB_ENV_VIEW.c.env).where(_JOB_ENV_VIEW.c.id.in_(ids))
    else:
        q = select(JOBS.c.id, JOBS.c.env).where(JOBS.c.id.in_(ids))
    return {r.id: dict(r.env or {}) for r in s.execute(q)}


def open_tasks(s: Session, arrays: Sequence[int]) -> list[int]:
    """Tasks of these arrays that have not ended, in index order."""
    if not arrays:
        return []
    done = [st.value for st in TERMINAL]
    q = (select(JOBS.c.id).where(JOBS.c.array_id.in_(arrays), JOBS.c.state.not_in(done))
         .order_by(JOBS.c.array_id, JOBS.c.array_index))
    return [int(i) for i in s.scalars(q)]


def array_tasks(s: Session, array_id: int) -> list[list[int]]:
    """Every task of an array as [job id, index], in index order
    (`show` of an array's id, `tpuq wait` of it)."""
    q = (select(JOBS.c.id, JOBS.c.array_index)
         .where(JOBS.c.array_id == array_id).order_by(JOBS.c.array_index))
    return [[int(i), int(n)] for i, n in s.execute(q)]


def current_attempts(s: Session, rows: Sequence[Row[Any]]) -> dict[int, Row[Any]]:
    """Each job's latest attempt (chips, started_at, checkpoint_step, ...), for status."""
    wanted = [(r.id, r.attempt) for r in rows if r.attempt]
    if not wanted:
        return {}
    ids = [j for j, _ in wanted]
    latest = dict(wanted)
    q = select(Attempt.job_id, Attempt.number, Attempt.chips, Attempt.started_at,
               Attempt.checkpoint_step, Attempt.checkpoint_at, Attempt.checkpoint_total,
               Attempt.eta_at
               ).where(Attempt.job_id.in_(ids))
    return {a.job_id: cast(Row[Any], a) for a in s.execute(q) if latest.get(a.job_id) == a.number}


def attempts_of(s: Session, job_id: int) -> list[Attempt]:
    return list(s.scalars(select(Attempt).where(Attempt.job_id == job_id).order_by(Attempt.number)))


def events_of(s: Session, job_id: int) -> list[JobEvent]:
    return list(s.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id)))


def hosts_with_jobs(s: Session) -> list[tuple[Host, dict[int, list[int]]]]:
    """Each host and {job_id: chips} of what holds its chips now."""
    out = []
    alloc = s.execute(select(Allocation.host, Allocation.chip, Allocation.job_id)).all()
    for h in s.scalars(select(Host).order_by(Host.name)):
        jobs: dict[int, list[int]] = {}
        for host, chip, job_id in alloc:
            if host == h.name:
                jobs.setdefault(job_id, []).append(chip)
        out.append((h, jobs))
    return out


def instance_id(s: Session) -> str:
    """The database's random id, made when it was created (migrations/versions/0003)."""
    return str(s.scalar(select(Meta.value).where(Meta.key == "instance")) or "")


def now(s: Session) -> float:
    return float(s.scalar(select(db_now())) or 0.0)


def is_terminal(state: str) -> bool:
    return JobState(state) not in (*ACTIVE, *WAITING)
