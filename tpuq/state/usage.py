"""What teams used: chip-hours per budget period, decayed for fair share, and the report
behind `tpuq quota`.

Usage comes from the `attempts` table: chips x (ended_at, or now while it runs, minus
started_at). Attempts that ended for reasons outside the job's control (NOT_CHARGED:
preempted, requeued, host error, lost) are recorded but never charged.

Two views of usage: chip-hours in the current budget period (periods start at local
midnight, Monday 00:00 or the 1st of the month) and usage decayed with the fair-share
half-life, which orders teams (tpuq/scheduler/fairshare.py).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from tpuq.state import direct, teams
from tpuq.state.clock import db_now
from tpuq.state.models import Allocation, Attempt, Host, Job, Team
from tpuq.state.states import NOT_CHARGED

PERIOD_WORDS = {"day": "daily", "week": "weekly", "month": "monthly"}
DECAY_HALF_LIVES = 5  # older attempts weigh < 3 %: not read at all
BURN_WINDOW_S = 86400.0


# ---- periods ------------------------------------------------------------------------------

def period_start(now: float, period: str) -> float:
    """Local start of the budget period containing `now`."""
    t = time.localtime(now)
    if period == "day":
        return _local(t.tm_year, t.tm_mon, t.tm_mday)
    if period == "week":
        return _local(t.tm_year, t.tm_mon, t.tm_mday - t.tm_wday)
    if period == "month":
        return _local(t.tm_year, t.tm_mon, 1)
    raise teams.TeamError(f"unknown budget period {period!r} (use {', '.join(teams.PERIODS)})")


def period_end(now: float, period: str) -> float:
    """When the budget next resets (local start of the following period)."""
    t = time.localtime(period_start(now, period))
    if period == "day":
        return _local(t.tm_year, t.tm_mon, t.tm_mday + 1)
    if period == "week":
        return _local(t.tm_year, t.tm_mon, t.tm_mday + 7)
    return _local(t.tm_year + t.tm_mon // 12, t.tm_mon % 12 + 1, 1)


def _local(year: int, month: int, day: int) -> float:
    # mktime normalises out-of-range days (day 0, day 35) and finds DST itself (isdst=-1)
    return time.mktime((year, month, day, 0, 0, 0, 0, 0, -1))


# ---- usage --------------------------------------------------------------------------------

@dataclass
class Usage:
    """Chip-hours of one team, charged attempts only."""

    period: float = 0.0  # in the current budget period
    decayed: float = 0.0  # fair-share usage
    last_24h: float = 0.0  # burn rate window
    by_period: dict[str, float] = field(default_factory=dict)  # period kind -> chip-hours


def _overlap_h(chips: int, start: float, end: float, lo: float, hi: float) -> float:
    return chips * max(0.0, min(end, hi) - max(start, lo)) / 3600.0


def usage(s: Session, now: float | None, half_life_h: float,
          periods: Mapping[str, str] | None = None) -> dict[str, Usage]:
    """team -> Usage, from one query over attempts that ended recently or still run.

    `periods` maps team -> budget period ("week" when absent).
    """
    if now is None:
        now = float(s.execute(select(db_now())).scalar_one())
    periods = periods or {}
    starts = {p: period_start(now, p) for p in teams.PERIODS}
    half_life_s = half_life_h * 3600.0
    horizon = DECAY_HALF_LIVES * half_life_s if math.isfinite(half_life_s) else math.inf
    since = min(now - horizon, now - BURN_WINDOW_S, *starts.values())
    out: dict[str, Usage] = defaultdict(Usage)
    for team, chips, started, ended in _charged(s, since):
        end = now if ended is None else min(ended, now)
        n = len(chips or ())
        if n == 0 or end <= started:
            continue
        u = out[team]
        for kind, lo in starts.items():
            u.by_period[kind] = u.by_period.get(kind, 0.0) + _overlap_h(n, started, end, lo, now)
        u.last_24h += _overlap_h(n, started, end, now - BURN_WINDOW_S, now)
        u.decayed += decay(n * (end - started) / 3600.0, now - end, half_life_s)
    for team, u in out.items():
        u.period = u.by_period.get(periods.get(team, "week"), 0.0)
    return dict(out)


def decay(usage: float, elapsed_s: float, half_life_s: float) -> float:
    """Usage after `elapsed_s` of exponential decay with the given half-life.

    A non-positive half-life means "no memory" (0.0); non-positive elapsed time leaves
    usage unchanged, so a clock step backwards never inflates usage.
    """
    if elapsed_s <= 0 or math.isinf(half_life_s):
        return usage
    if half_life_s <= 0:
        return 0.0
    return usage * math.pow(0.5, elapsed_s / half_life_s)


def _charged(s: Session, since: float) -> Iterable[Any]:
    not_charged = [o.value for o in NOT_CHARGED]
    return s.execute(
        select(Job.team, Attempt.chips, Attempt.started_at, Attempt.ended_at)
        .join(Job, Job.id == Attempt.job_id)
        .where(Attempt.started_at.is_not(None),
               or_(Attempt.ended_at.is_(None), Attempt.ended_at >= since),
               or_(Attempt.outcome.is_(None), Attempt.outcome.not_in(not_charged)))
    ).all()


# chips booked per team, owner and type of host: read every pass
_RUNNING = (select(Job.team, Job.owner, Host.tpu_type, func.count())
            .select_from(Allocation)
            .join(Job, Job.id == Allocation.job_id)
            .join(Host, Host.name == Allocation.host, isouter=True)
            .group_by(Job.team, Job.owner, Host.tpu_type))


def team_running(s: Session) -> dict[str, tuple[int, dict[str, int], dict[str, int]]]:
    rows = direct.rows(s, _RUNNING)
    out: dict[str, tuple[int, dict[str, int], dict[str, int]]] = {}
    for team, owner, tpu_type, n in rows:
        total, by_type, by_user = out.get(team, (0, {}, {}))
        by_type[tpu_type or "?"] = by_type.get(tpu_type or "?", 0) + n
        by_user[owner] = by_user.get(owner, 0) + n
        out[team] = (total + n, by_type, by_user)
    return out


# ---- the report behind `tpuq quota` ----------------------------------------------------------

def report(s: Session, half_life_h: float) -> list[dict[str, Any]]:
    """Every known team (configured, running or with recent usage) against its limits."""
    now = float(s.execute(select(db_now())).scalar_one())
    rows = {t.name: t for t in teams.all_teams(s)}
    running = team_running(s)
    used = usage(s, now, half_life_h, {n: t.budget_period for n, t in rows.items()})
    people = teams.members(s)
    return [_team_report(name, rows.get(name), running.get(name, (0, {}, {})),
                         used.get(name, Usage()), people.get(name, []), now)
            for name in sorted(set(rows) | set(running) | set(used))]


def _team_report(name: str, row: Team | None, running: tuple[int, dict[str, int], dict[str, int]],
                 use: Usage, people: list[str], now: float) -> dict[str, Any]:
    period = row.budget_period if row else "week"
    budget = row.budget_chip_hours if row else None
    burn_per_day = use.last_24h * (86400.0 / BURN_WINDOW_S)
    left = None if budget is None else budget - use.period
    lasts_days = None
    if left is not None and burn_per_day > 0:
        lasts_days = max(0.0, left) / burn_per_day
    return {
        "team": name, "members": people, "share": row.share if row else 1.0,
        "chips": running[0], "chips_by_type": running[1], "chips_by_user": running[2],
        "max_chips": row.max_chips if row else None,
        "max_chips_per_user": row.max_chips_per_user if row else None,
        "max_chips_by_type": dict(row.max_chips_by_type or {}) if row else {},
        "budget_period": period, "budget_chip_hours": budget,
        "used_chip_hours": round(use.period, 4), "budget_left": left,
        "budget_resets_at": period_end(now, period) if budget is not None else None,
        "burn_chip_hours_24h": round(use.last_24h, 4), "budget_lasts_days": lasts_days,
        "fair_share_usage": round(use.decayed, 4),
        "grant_expires_at": row.grant_expires_at if row else None, "now": now,
    }
