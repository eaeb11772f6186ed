"""Ended jobs over a period, with what they cost (`tpuq history`, as SLURM's sacct).

Chip-hours per attempt: its chips times its run time; charged unless the attempt ended
for a reason outside the job's control (states.NOT_CHARGED: preempted, requeued, a host
error, lost), the same rule the quotas use (usage.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Text, cast, or_, select
from sqlalchemy.orm import Session

from tpuq.state.models import Attempt, Job
from tpuq.state.states import NOT_CHARGED, TERMINAL

_FREE = {o.value for o in NOT_CHARGED}


def ended(s: Session, *, since: float | None, until: float | None, user: str | None,
          team: str | None, states: Sequence[str], match: str | None = None,
          newest: int | None = None, skip: int = 0) -> list[dict[str, Any]]:
    """One row per job that ended in [since, until), oldest first. `match`: only jobs
    whose name or command holds this text (any case); `newest`: only the newest this
    many, after skipping the `skip` newest (a page of a long history, read as a page)."""
    where: list[ColumnElement[bool]] = [
        Job.state.in_(list(states) or [st.value for st in TERMINAL]), Job.ended_at.is_not(None)]
    if since is not None:
        where.append(Job.ended_at >= since)
    if until is not None:
        where.append(Job.ended_at < until)
    if user:
        where.append(Job.owner == user)
    if team:
        where.append(Job.team == team)
    if match:
        where.append(or_(Job.name.icontains(match, autoescape=True),
                         cast(Job.command, Text).icontains(match, autoescape=True)))
    q = select(Job.id, Job.name, Job.command, Job.owner, Job.team, Job.state, Job.chips,
               Job.tpu_type, Job.submitted_at, Job.ended_at, Job.attempt).where(*where)
    if newest is not None:
        page = q.order_by(Job.ended_at.desc(), Job.id.desc()).limit(newest).offset(skip)
        jobs = sorted(s.execute(page), key=lambda j: (j.ended_at, j.id))
        where = [Job.id.in_([j.id for j in jobs])]
    else:
        jobs = list(s.execute(q.order_by(Job.ended_at, Job.id)))
    cost: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])  # run, charged, free
    held: dict[int, tuple[int, int]] = {}  # its latest attempt: (number, chips it held)
    # the attempts of the same jobs in one query (a join on the same filter, not a list of
    # ten thousand ids)
    for a in s.execute(select(Attempt.job_id, Attempt.number, Attempt.chips,
                              Attempt.started_at, Attempt.ended_at, Attempt.outcome)
                       .join(Job, Job.id == Attempt.job_id).where(*where)):
        if a.number > held.get(a.job_id, (0, 0))[0]:
            held[a.job_id] = (a.number, len(a.chips or ()))
        if a.started_at is None or a.ended_at is None:
            continue
        run = max(0.0, a.ended_at - a.started_at)
        hours = run * len(a.chips or ()) / 3600.0
        c = cost[a.job_id]
        c[0] += run
        c[2 if a.outcome in _FREE else 1] += hours
    return [{"id": j.id, "name": j.name, "command": list(j.command), "owner": j.owner,
             "team": j.team, "state": j.state, "chips": j.chips, "tpu_type": j.tpu_type,
             "submitted_at": j.submitted_at, "ended_at": j.ended_at, "attempts": j.attempt,
             "runtime_s": round(cost[j.id][0], 3),
             "chip_hours": round(cost[j.id][1], 6),
             "chip_hours_not_charged": round(cost[j.id][2], 6),
             # what its latest attempt held (a whole-host job: the host's); None: no host
             "chips_held": held[j.id][1] if j.id in held else None} for j in jobs]
