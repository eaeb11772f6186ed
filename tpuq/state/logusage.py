"""What each owner's job logs take, place by place, beside the budget they are held to:
written by each agent's log keeper (agent/duties/logkeeper.py), read by `tpuq submit`, `status`
and `show` to say who is over budget."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from tpuq.state import direct
from tpuq.state.clock import db_now
from tpuq.state.models import Attempt, GangWorker, Host, Job, LogUsage

USAGE = cast(Table, LogUsage.__table__)


def record(s: Session, place: str, usage: Mapping[str, int], budget: int) -> None:
    """`place`'s measure: bytes per owner (owners not in it have nothing there now)."""
    s.execute(delete(USAGE).where(USAGE.c.place == place,
                                  USAGE.c.owner.not_in(list(usage) or [""])))
    if not usage:
        return
    mod = postgresql if s.get_bind().dialect.name == "postgresql" else sqlite
    rows = [{"owner": owner, "place": place, "bytes": size, "budget": budget,
             "updated_at": db_now()} for owner, size in usage.items()]
    stmt = mod.insert(USAGE).values(rows)
    s.execute(stmt.on_conflict_do_update(
        index_elements=["owner", "place"],
        set_={"bytes": stmt.excluded.bytes, "budget": stmt.excluded.budget,
              "updated_at": stmt.excluded.updated_at}))


def over_budget(s: Session, owner: str | None = None) -> list[Any]:
    """(owner, place, bytes, budget) of every host where an owner's logs (`owner`'s
    only, if given) take more than their budget, by owner and place. A host an admin
    forgot (`tpuq host forget`) has no say any more."""
    if owner is None:
        return direct.rows(s, _OVER_BUDGET)
    return direct.rows(s, _OVER_BUDGET_OF, {"owner": owner})


# built once: every submit asks (state/direct.py)
_OVER = select(USAGE.c.owner, USAGE.c.place, USAGE.c.bytes, USAGE.c.budget).where(
    USAGE.c.bytes > USAGE.c.budget, USAGE.c.place.in_(select(Host.name)))
_OVER_BUDGET = _OVER.order_by(USAGE.c.owner, USAGE.c.place)
_OVER_BUDGET_OF = _OVER.where(USAGE.c.owner == bindparam("owner")).order_by(USAGE.c.place)



def logs_of(s: Session, job_ids: list[int]
            ) -> dict[tuple[int, int, int], tuple[str, str, float | None]]:
    """(job, attempt, worker) -> (owner, host, ended_at) of the jobs whose logs a host
    holds: worker 0 is a single-host job's attempt (or a slice job's first worker);
    every worker of a slice job's attempt ends with the attempt."""
    out: dict[tuple[int, int, int], tuple[str, str, float | None]] = {}
    for i in range(0, len(job_ids), 1000):
        chunk = job_ids[i:i + 1000]
        for job_id, number, owner, host, ended_at in s.execute(
                select(Attempt.job_id, Attempt.number, Job.owner, Attempt.host,
                       Attempt.ended_at)
                .join(Job, Job.id == Attempt.job_id).where(Attempt.job_id.in_(chunk))):
            out[(job_id, number, 0)] = (owner, host, ended_at)
        for job_id, number, worker, host in s.execute(
                select(GangWorker.job_id, GangWorker.attempt, GangWorker.worker,
                       GangWorker.host).where(GangWorker.job_id.in_(chunk))):
            owner, _, ended_at = out.get((job_id, number, 0), ("", "", None))
            if owner:
                out[(job_id, number, worker)] = (owner, host, ended_at)
    return out
