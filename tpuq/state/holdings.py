"""Who holds which chips, and until when: what the start forecast frees as time goes on
(scheduler/forecast.py).

A running job is expected to end at its ETA (from the progress it reports, when it gave
a total) and at the latest at its time limit; a job with neither has no expected end.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from tpuq.state.models import Allocation, Attempt, Host, Job


def held(s: Session) -> Iterator[tuple[int, str, str, str, str | None, list[int], float | None]]:
    """(job, team, owner, host, host's type, chips, expected end) per job and host."""
    started = func.coalesce(Attempt.started_at, Attempt.assigned_at)
    q = (select(Allocation.job_id, Allocation.host, Allocation.chip, Job.team, Job.owner,
                Host.tpu_type, (started + Job.time_limit_s).label("limit_at"), Attempt.eta_at)
         .join(Job, Job.id == Allocation.job_id)
         .join(Attempt, and_(Attempt.job_id == Allocation.job_id,
                             Attempt.number == Allocation.attempt))
         .join(Host, Host.name == Allocation.host, isouter=True))
    groups: dict[tuple[int, str], list[Any]] = {}
    for r in s.execute(q):
        groups.setdefault((r.job_id, r.host), []).append(r)
    for (job_id, host), rows in groups.items():
        r = rows[0]
        yield (job_id, r.team, r.owner, host, r.tpu_type, sorted(x.chip for x in rows),
               expected_end(r.limit_at, r.eta_at))


def expected_end(limit_at: float | None, eta_at: float | None) -> float | None:
    """The ETA the job reported, never past its time limit."""
    ends = [t for t in (limit_at, eta_at) if t is not None]
    return min(ends) if ends else None
