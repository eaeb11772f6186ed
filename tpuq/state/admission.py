"""Admission through SQLAlchemy: the facts a submit's transaction reads, for the rules
in state/admission_rules.py (what is refused at submit, and what is warned of)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from tpuq.spec import JobSpec
from tpuq.state import teams
from tpuq.state.admission_rules import (
    Facts,
    TeamCaps,
    check_chips,
    decide,
    needs_member,
    needs_team_names,
    sizes_of,
)
from tpuq.state.models import Host, TeamMember


def admit(s: Session, spec: JobSpec, *, admin: bool, open_team: str) -> list[str]:
    """Refuse (SpecError) what cannot run; the warnings for what may wait a long time."""
    return decide(spec, read_facts(s, spec, admin=admin, open_team=open_team),
                  admin=admin, open_team=open_team)


def read_facts(s: Session, spec: JobSpec, *, admin: bool, open_team: str) -> Facts:
    row = teams.get(s, spec.team)
    team = None if row is None else TeamCaps(
        name=row.name, max_chips=row.max_chips, max_chips_per_user=row.max_chips_per_user,
        max_chips_by_type=dict(row.max_chips_by_type or {}))
    facts = Facts(team=team)
    if needs_team_names(spec, team, open_team):
        facts.team_names = [t.name for t in teams.all_teams(s)]
    if needs_member(spec, team, admin=admin, open_team=open_team):
        facts.member = s.get(TeamMember, (spec.team, spec.owner)) is not None
    if spec.workers is not None:
        facts.slice_known = s.execute(select(Host.slice_name).where(
            Host.slice_type == spec.tpu_type).limit(1)).first() is not None
    else:
        facts.sizes = _host_sizes(s, spec.tpu_type)
    return facts


def check_shape(s: Session, spec: JobSpec) -> None:
    """The chip rule alone (a resubmit keeps its team; its shape is checked again)."""
    if spec.workers is None:
        check_chips(spec, _host_sizes(s, spec.tpu_type))


def _host_sizes(s: Session, tpu_type: str | None) -> list[int]:
    q = select(Host.chips).where(Host.slice_name.is_(None))  # slice workers: slice jobs only
    if tpu_type:
        q = q.where(Host.tpu_type == tpu_type)
    return sizes_of(list(s.scalars(q)))
