"""The one way a job's state changes.

Every change is a compare-and-set (`UPDATE ... WHERE id AND state AND attempt [AND host]`)
that must change exactly one row, and writes its `job_events` row in the same
transaction. A refused compare-and-set returns False: the caller was fenced out (a stale
doorbell, a lease that expired, a job cancelled meanwhile) and must do nothing more.
An attempt to make a transition the state machine does not allow is a bug: it raises.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from tpuq.state.clock import db_now
from tpuq.state.models import Job, JobEvent
from tpuq.state.states import JobState, allowed


class InvalidTransition(ValueError):
    pass


def transition(
    s: Session,
    job_id: int,
    frm: Iterable[JobState],
    to: JobState,
    *,
    attempt: int | None = None,
    host: str | None = None,
    reason: str | None = None,
    actor: str | None = None,
    values: Mapping[str, Any] | None = None,
) -> bool:
    """Move job `job_id` from one of `frm` to `to`; True when this call made the change."""
    sources = tuple(frm)
    for f in sources:
        if not allowed(f, to):
            raise InvalidTransition(f"{f.value} -> {to.value} is not an allowed transition")
    guard = [Job.id == job_id]
    if attempt is not None:
        guard.append(Job.attempt == attempt)
    if host is not None:
        guard.append(Job.host == host)
    changes: dict[str, Any] = {"state": to.value, "updated_at": db_now()}
    if reason is not None:
        changes["reason"] = reason
    changes.update(values or {})
    if len(sources) == 1:
        # one possible source state: a single UPDATE ... RETURNING is the whole CAS
        frm_state = sources[0].value
        row = s.execute(
            update(Job).where(*guard, Job.state == frm_state).values(**changes)
            .returning(Job.attempt).execution_options(synchronize_session=False)
        ).first()
        if row is None:
            return False
        event_attempt = int(row.attempt)
    else:
        current = s.execute(select(Job.state, Job.attempt).where(*guard)).first()
        if current is None or JobState(current.state) not in sources:
            return False
        result = s.execute(
            update(Job)
            .where(*guard, Job.state == current.state, Job.attempt == current.attempt)
            .values(**changes)
            .execution_options(synchronize_session=False)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            return False
        frm_state = current.state
        event_attempt = int(changes.get("attempt", current.attempt))
    s.execute(
        insert(JobEvent).values(
            job_id=job_id,
            at=db_now(),
            from_state=frm_state,
            to_state=to.value,
            attempt=event_attempt,
            reason=reason,
            actor=actor,
        )
    )
    return True
