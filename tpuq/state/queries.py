"""Read-only views for the CLI: job lists, one job's story, hosts with what runs there."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from tpuq.state.clock import db_now
from tpuq.state.models import Allocation, Attempt, Host, Job, JobEvent
from tpuq.state.states import ACTIVE, WAITING, JobState


def list_jobs(s: Session, *, states: Sequence[str] | None = None, owner: str | None = None,
              team: str | None = None, recent: int = 20) -> list[Job]:
    """Waiting and active jobs, plus the `recent` newest finished ones."""
    q = select(Job)
    if owner:
        q = q.where(Job.owner == owner)
    if team:
        q = q.where(Job.team == team)
    if states:
        return list(s.scalars(q.where(Job.state.in_(states)).order_by(Job.id)))
    live = [st.value for st in (*ACTIVE, *WAITING)]
    open_jobs = list(s.scalars(q.where(Job.state.in_(live)).order_by(Job.id)))
    done = list(s.scalars(q.where(Job.state.not_in(live)).order_by(Job.id.desc()).limit(recent)))
    return sorted(open_jobs + done, key=lambda j: j.id)


def job(s: Session, job_id: int) -> Job | None:
    return s.get(Job, job_id)


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


def now(s: Session) -> float:
    return float(s.scalar(select(db_now())) or 0.0)


def is_terminal(state: str) -> bool:
    return JobState(state) not in (*ACTIVE, *WAITING)
