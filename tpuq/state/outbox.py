"""The notification outbox: claim what is due, record how each send went.

Rows are written by the job's state change itself (transitions._notification), so an
event the owner asked to hear of is never lost to a crash; any agent may send it. A
claim is a lease (claimed_by, claimed_until): an agent that dies mid-send leaves the row
to be claimed again once the lease ends, so a destination may, rarely, hear twice
(at least once), but never silently not at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Table, and_, or_, select, update
from sqlalchemy.orm import Session

from tpuq.state.clock import db_now
from tpuq.state.models import Job, Notification

NOTES = cast(Table, Notification.__table__)
JOBS = cast(Table, Job.__table__)
CLAIM_S = 300.0  # long enough for a slow send to every destination of one row

# what a message needs of its job
_JOB_COLUMNS = tuple(JOBS.c[n] for n in (
    "name", "owner", "command", "state", "reason", "exit_code", "exit_signal", "host",
    "attempt", "preemptions", "failures", "submitted_at", "ended_at", "array_id",
    "array_index", "notify_to"))


def _claimable() -> Any:
    now = db_now()
    return and_(NOTES.c.state == "pending", NOTES.c.next_at <= now,
                or_(NOTES.c.claimed_until.is_(None), NOTES.c.claimed_until < now))


def any_due(s: Session) -> bool:
    """Whether a claim would find anything: read first, so an idle sender never takes
    SQLite's write lock."""
    return s.execute(select(NOTES.c.id).where(_claimable()).limit(1)).first() is not None


def claim(s: Session, host: str, limit: int = 20) -> list[Any]:
    """Up to `limit` due rows, claimed for `host`, with their jobs' columns (_JOB_COLUMNS)."""
    now = db_now()
    claimable = _claimable()
    due = select(NOTES.c.id).where(claimable).order_by(NOTES.c.id).limit(limit)
    if s.get_bind().dialect.name == "postgresql":
        due = due.with_for_update(skip_locked=True)
    ids = list(s.scalars(due))
    if not ids:
        return []
    s.execute(update(NOTES).where(NOTES.c.id.in_(ids), claimable)
              .values(claimed_by=host, claimed_until=now + CLAIM_S))
    return list(s.execute(
        select(NOTES.c.id, NOTES.c.job_id, NOTES.c.event, NOTES.c.tries, NOTES.c.sent_to,
               NOTES.c.detail, NOTES.c.created_at,
               # the job's count when the event was written (the job's own may be higher)
               NOTES.c.preemptions.label("count"), *_JOB_COLUMNS)
        .join(JOBS, JOBS.c.id == NOTES.c.job_id)
        .where(NOTES.c.id.in_(ids), NOTES.c.claimed_by == host).order_by(NOTES.c.id)).all())


def _mine(note_id: int, host: str) -> Any:
    return and_(NOTES.c.id == note_id, NOTES.c.claimed_by == host, NOTES.c.state == "pending")


def sent(s: Session, note_id: int, host: str) -> None:
    s.execute(update(NOTES).where(_mine(note_id, host)).values(
        state="sent", sent_at=db_now(), claimed_until=None, tries=NOTES.c.tries + 1))


def skipped(s: Session, note_id: int, host: str, why: str) -> None:
    s.execute(update(NOTES).where(_mine(note_id, host)).values(
        state="skipped", last_error=why, claimed_until=None))


def failed(s: Session, note_id: int, host: str, error: str, sent_to: Sequence[int], *,
           retry_in_s: float | None) -> None:
    """A try that did not reach every destination: again in `retry_in_s` (to those not
    told yet), or given up for good (None)."""
    s.execute(update(NOTES).where(_mine(note_id, host)).values(
        state="pending" if retry_in_s is not None else "failed",
        tries=NOTES.c.tries + 1, last_error=error[:2000], claimed_until=None,
        next_at=db_now() + (retry_in_s or 0.0),
        sent_to=",".join(map(str, sorted(sent_to))) or None))


def of_jobs(s: Session, job_ids: Sequence[int]) -> dict[int, list[Any]]:
    """For `show`: each job's notifications, oldest first."""
    if not job_ids:
        return {}
    rows = s.execute(select(NOTES.c.job_id, NOTES.c.event, NOTES.c.state, NOTES.c.tries,
                            NOTES.c.created_at, NOTES.c.sent_at, NOTES.c.last_error,
                            NOTES.c.detail)
                     .where(NOTES.c.job_id.in_(list(job_ids))).order_by(NOTES.c.id)).all()
    out: dict[int, list[Any]] = {}
    for r in rows:
        out.setdefault(r.job_id, []).append(r)
    return out
