"""Who holds which chips, and until when: what the start forecast frees as time goes on
(scheduler/forecast.py).

A running job is expected to end at its ETA (from the progress it reports, when it gave
a total), else when its owner's jobs usually end (the share of the time limit their
recent jobs used), and at the latest at its time limit; a job with no limit and no ETA
has no expected end.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from tpuq.state.clock import db_now
from tpuq.state.models import Allocation, Attempt, Host, Job
from tpuq.state.states import Outcome

SHARE_SAMPLE = 5000  # newest ended jobs read for the shares of their limits
SHARE_WINDOW_S = 14 * 86400.0


def held(s: Session, share: dict[str, float] | None = None
         ) -> Iterator[tuple[int, str, str, str, str | None, list[int], float | None]]:
    """(job, team, owner, host, host's type, chips, expected end) per job and host;
    `share`: owner -> the share of the time limit their jobs use (`shares`)."""
    share = share or {}
    started = func.coalesce(Attempt.started_at, Attempt.assigned_at).label("started")
    q = (select(Allocation.job_id, Allocation.host, Allocation.chip, Job.team, Job.owner,
                Host.tpu_type, started, Job.time_limit_s, Attempt.eta_at)
         .join(Job, Job.id == Allocation.job_id)
         .join(Attempt, and_(Attempt.job_id == Allocation.job_id,
                             Attempt.number == Allocation.attempt))
         .join(Host, Host.name == Allocation.host, isouter=True))
    groups: dict[tuple[int, str], list[Any]] = {}
    for r in s.execute(q):
        groups.setdefault((r.job_id, r.host), []).append(r)
    for (job_id, host), rows in groups.items():
        r = rows[0]
        limit_at = None if r.time_limit_s is None else \
            r.started + r.time_limit_s * min(1.0, share.get(r.owner, 1.0))
        yield (job_id, r.team, r.owner, host, r.tpu_type, sorted(x.chip for x in rows),
               expected_end(limit_at, r.eta_at))


def expected_end(limit_at: float | None, eta_at: float | None) -> float | None:
    """The ETA the job reported, never past its time limit."""
    ends = [t for t in (limit_at, eta_at) if t is not None]
    return min(ends) if ends else None


def shares(s: Session) -> dict[str, float]:
    """owner -> the median share of its time limit an owner's jobs ran, over jobs with a
    limit that succeeded lately (how long a job runs is its owner's habit: a limit
    set with room to spare stays so)."""
    q = (select(Job.owner, (Attempt.ended_at - Attempt.started_at) / Job.time_limit_s)
         .select_from(Attempt).join(Job, Job.id == Attempt.job_id)
         .where(Attempt.outcome == Outcome.SUCCEEDED.value, Job.time_limit_s > 0,
                Attempt.started_at.is_not(None),
                Attempt.ended_at > db_now() - SHARE_WINDOW_S)
         .order_by(Attempt.ended_at.desc()).limit(SHARE_SAMPLE))
    used: dict[str, list[float]] = {}
    for owner, share in s.execute(q):
        if share is not None:
            used.setdefault(owner, []).append(max(0.0, min(1.0, float(share))))
    return {owner: statistics.median(v) for owner, v in used.items()}
