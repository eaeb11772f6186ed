"""Teams: members, shares and limits (the quota settings admins change).

What teams used, and the report behind `tpuq quota`, is usage.py.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from tpuq.errors import TpuqError
from tpuq.state.db import rows_changed
from tpuq.state.models import Team, TeamMember

PERIODS = ("day", "week", "month")
QUOTA_FIELDS = ("share", "max_chips", "max_chips_per_user", "max_chips_by_type",
                "budget_chip_hours", "budget_period", "grant_expires_at")


class TeamError(TpuqError, ValueError):
    """A quota setting that cannot be used; the message is shown as is."""


# ---- CRUD ---------------------------------------------------------------------------------

def get(s: Session, name: str) -> Team | None:
    return s.get(Team, name, populate_existing=True)


def all_teams(s: Session) -> list[Team]:
    return list(s.scalars(select(Team).order_by(Team.name)))


def _ensure(s: Session, name: str) -> Team:
    team = get(s, name)
    if team is None:
        team = Team(name=name, share=1.0, max_chips_by_type={}, budget_period="week")
        s.add(team)
        s.flush()
    return team


def set_quota(s: Session, name: str, **values: Any) -> Team:
    """Create the team if needed and change the given fields (None clears a limit)."""
    unknown = set(values) - set(QUOTA_FIELDS)
    if unknown:
        raise TeamError(f"unknown quota fields: {', '.join(sorted(unknown))}")
    _check(values)
    team = _ensure(s, name)
    for key, value in values.items():
        setattr(team, key, value)
    s.flush()
    return team


def _check(values: Mapping[str, Any]) -> None:
    if values.get("share") is not None and values["share"] < 0:
        raise TeamError("--share cannot be negative")
    for key in ("max_chips", "max_chips_per_user", "budget_chip_hours"):
        if values.get(key) is not None and values[key] < 0:
            raise TeamError(f"--{key.replace('_', '-')} cannot be negative")
    for key, cap in (values.get("max_chips_by_type") or {}).items():
        if not key or cap < 0:
            raise TeamError(f"bad per-type cap {key}={cap}")
    if "budget_period" in values and values["budget_period"] not in PERIODS:
        raise TeamError(f"unknown budget period {values['budget_period']!r} "
                        f"(use {', '.join(PERIODS)})")


def add_member(s: Session, team: str, user: str) -> bool:
    """True if added, False if already a member."""
    _ensure(s, team)
    if s.get(TeamMember, (team, user)) is not None:
        return False
    s.add(TeamMember(team=team, user=user))
    s.flush()
    return True


def remove_member(s: Session, team: str, user: str) -> bool:
    r = s.execute(delete(TeamMember).where(TeamMember.team == team, TeamMember.user == user))
    return bool(rows_changed(r))


def members(s: Session) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for team, user in s.execute(select(TeamMember.team, TeamMember.user)
                                .order_by(TeamMember.team, TeamMember.user)):
        out[team].append(user)
    return dict(out)
