"""Function jobs in the database: the pickled call a submit stores, the outcome an agent
stores after an attempt ran it (tpuq/runfn.py runs it; tpuq/client.py reads it)."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Table, insert, select, update
from sqlalchemy.orm import Session

from tpuq.state.clock import db_now
from tpuq.state.models import JobFunction

FUNCTIONS = cast(Table, JobFunction.__table__)


def store_payload(s: Session, job_id: int, payload: bytes) -> None:
    s.execute(insert(FUNCTIONS).values(job_id=job_id, payload=payload))


def store_payloads(s: Session, payloads: list[tuple[int, bytes]]) -> None:
    """Many jobs' calls in one statement (a batch submit)."""
    if payloads:
        s.execute(insert(FUNCTIONS), [{"job_id": j, "payload": p} for j, p in payloads])


def payload_of(s: Session, job_id: int) -> bytes | None:
    return s.scalar(select(FUNCTIONS.c.payload).where(FUNCTIONS.c.job_id == job_id))


def store_result(s: Session, job_id: int, attempt: int, result: bytes) -> None:
    """The outcome of `attempt`; a later attempt's replaces it."""
    s.execute(update(FUNCTIONS).where(FUNCTIONS.c.job_id == job_id).values(
        result=result, result_attempt=attempt, result_at=db_now()))


def result_of(s: Session, job_id: int) -> Any:
    """The function job's row (`result`: its outcome, None until an attempt ran it);
    None when there is no such function job this session may read."""
    return s.execute(select(FUNCTIONS.c.result, FUNCTIONS.c.result_attempt)
                     .where(FUNCTIONS.c.job_id == job_id)).first()
