"""Admission through SQLAlchemy: the facts a submit's transaction reads, for the rules
in state/admission_rules.py (what is refused at submit, and what is warned of)."""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table, bindparam, select
from sqlalchemy.orm import Session

from tpuq.spec import JobSpec
from tpuq.state import direct, teams
from tpuq.state.admission_rules import (
    Facts,
    TeamCaps,
    check_chips,
    decide,
    needs_member,
    needs_team_names,
    sizes_of,
)
from tpuq.state.models import Host, Team, TeamMember

HOSTS = cast(Table, Host.__table__)
TEAMS = cast(Table, Team.__table__)

# the reads of every submit, built once and compiled once (state/direct.py): through
# the ORM (an identity-map load, a statement built per call) they took about as long as
# writing the job
_TEAM = select(TEAMS.c.name, TEAMS.c.max_chips, TEAMS.c.max_chips_per_user,
               TEAMS.c.max_chips_by_type).where(TEAMS.c.name == bindparam("team"))
# a slice's workers take slice jobs only
_SIZES = select(HOSTS.c.chips).where(HOSTS.c.slice_name.is_(None))
_SIZES_OF_TYPE = _SIZES.where(HOSTS.c.tpu_type == bindparam("tpu_type"))


def admit(s: Session, spec: JobSpec, *, admin: bool, open_team: str) -> list[str]:
    """Refuse (SpecError) what cannot run; the warnings for what may wait a long time."""
    return decide(spec, read_facts(s, spec, admin=admin, open_team=open_team),
                  admin=admin, open_team=open_team)


def read_facts(s: Session, spec: JobSpec, *, admin: bool, open_team: str) -> Facts:
    """The facts of `spec`'s admission; the team and the hosts' sizes read together (one
    round trip on PostgreSQL), fresh from the database."""
    calls: list[direct.Call] = [(_TEAM, {"team": spec.team}, None)]
    if spec.workers is None:
        calls.append(_sizes_call(spec.tpu_type))
    found = direct.rows_of_each(s, calls)
    row = found[0][0] if found[0] else None
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
        facts.sizes = sizes_of([r.chips for r in found[1]])
    return facts


def check_shape(s: Session, spec: JobSpec) -> None:
    """The chip rule alone (a resubmit keeps its team; its shape is checked again)."""
    if spec.workers is None:
        stmt, params, _ = _sizes_call(spec.tpu_type)
        check_chips(spec, sizes_of([r.chips for r in direct.rows(s, stmt, params)]))


def _sizes_call(tpu_type: str | None) -> direct.Call:
    """Every host's chips that a job of `tpu_type` (any type: None) may run on."""
    return (_SIZES_OF_TYPE, {"tpu_type": tpu_type}, None) if tpu_type else (_SIZES, None, None)
