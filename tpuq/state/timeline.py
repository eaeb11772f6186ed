"""The dashboard's pictures: which job holds each chip now, and attempts over days.

Only what `tpuq status` and `tpuq show` show anyone (job, owner, pid, state, how an
attempt ended): never a job's environment, output or notification destinations.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from tpuq.state.models import Allocation, Attempt, Job
from tpuq.state.states import NOT_CHARGED

_NOT_CHARGED = tuple(o.value for o in NOT_CHARGED)
MAX_BARS = 5000  # attempts drawn at most on one timeline


def chip_holders(s: Session) -> list[Any]:
    """(host, chip, job_id, owner, name, state, pid) of every chip booked now."""
    q = (select(Allocation.host, Allocation.chip, Allocation.job_id, Job.owner, Job.name,
                Job.state, Attempt.pid)
         .join(Job, Job.id == Allocation.job_id)
         .join(Attempt, and_(Attempt.job_id == Allocation.job_id,
                             Attempt.number == Allocation.attempt), isouter=True)
         .order_by(Allocation.host, Allocation.chip))
    return list(s.execute(q).all())


def attempts_between(s: Session, lo: float, hi: float,
                     limit: int = MAX_BARS) -> list[Any]:
    """Attempts that held chips at some time in [lo, hi], newest last: (job_id, number,
    host, chips, assigned_at, started_at, ended_at, outcome, reason, owner, team)."""
    q = (select(Attempt.job_id, Attempt.number, Attempt.host, Attempt.chips,
                Attempt.assigned_at, Attempt.started_at, Attempt.ended_at, Attempt.outcome,
                Attempt.reason, Job.owner, Job.team)
         .join(Job, Job.id == Attempt.job_id)
         .where(Attempt.assigned_at <= hi, or_(Attempt.ended_at.is_(None), Attempt.ended_at >= lo))
         .order_by(Attempt.assigned_at.desc()).limit(limit))
    return list(s.execute(q).all())[::-1]


def charged_spans(s: Session, lo: float) -> list[tuple[str, int, float, float | None]]:
    """(team, chips, started, ended) of attempts charged to their team (usage.py's rule)
    that ran at some time since `lo`: a team's burn-down over its budget period."""
    q = (select(Job.team, Attempt.chips, Attempt.started_at, Attempt.ended_at)
         .join(Job, Job.id == Attempt.job_id)
         .where(Attempt.started_at.is_not(None),
                or_(Attempt.ended_at.is_(None), Attempt.ended_at >= lo),
                or_(Attempt.outcome.is_(None), Attempt.outcome.not_in(_NOT_CHARGED))))
    return [(r.team, len(r.chips or ()), float(r.started_at), r.ended_at) for r in s.execute(q)]
