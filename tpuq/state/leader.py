"""Scheduler leadership as a lease row, on the database clock.

Works the same on SQLite and PostgreSQL: whoever renews an unexpired lease (or takes an
expired one) leads; a leader that dies stops renewing and another agent takes over
within one lease length.
"""

from __future__ import annotations

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from tpuq.state.clock import db_now
from tpuq.state.db import rows_changed
from tpuq.state.models import Leader

# The scheduler's role. Releases before schema 0015 led as "scheduler"; that migration
# refuses the role, so their agents never lead on a schema they do not know
# (migrations/versions/0015_code_fence.py)
SCHEDULER = "scheduler/2"

def acquire(s: Session, role: str, holder: str, lease_s: float,
            passes: tuple[int, float, float | None] = (0, 0.0, None)) -> bool:
    """Take or renew the lease for `role`; True when `holder` leads now. `passes`: the
    holder's scheduling passes while it led so far (count, total and last seconds),
    recorded with the renewal for metrics (one write that happens anyway)."""
    count, total, last = passes
    r = s.execute(
        update(Leader)
        .where(Leader.role == role, (Leader.holder == holder) | (Leader.expires_at < db_now()))
        .values(holder=holder, expires_at=db_now() + lease_s, pass_count=count,
                pass_seconds_sum=total, pass_seconds_last=last)
    )
    if rows_changed(r):
        return True
    if s.scalar(select(Leader.role).where(Leader.role == role)) is not None:
        return False
    try:
        with s.begin_nested():
            s.execute(insert(Leader).values(role=role, holder=holder, expires_at=db_now() + lease_s,
                                            pass_count=count, pass_seconds_sum=total,
                                            pass_seconds_last=last))
    except IntegrityError:
        return False
    return True


def release(s: Session, role: str, holder: str) -> None:
    s.execute(update(Leader).where(Leader.role == role, Leader.holder == holder)
              .values(expires_at=0.0))


def current(s: Session, role: str) -> str | None:
    return s.scalar(select(Leader.holder).where(Leader.role == role, Leader.expires_at >= db_now()))
