"""Admission: what cannot ever run is refused at submit, in one line.

A job is refused when its TPU type does not exist, when no registered host of its type
has the chips it asks for, when it needs more chips at once than its team's caps allow,
or when its team does not exist or the owner is not a member. Teams are made by admins
(`tpuq quota set`, `tpuq quota add-member`); the deployment's default team is open to all.
Before any host (of the type asked) has registered, a submit is accepted with a warning:
there is nothing yet to check the chips against.
"""

from __future__ import annotations

import difflib

from sqlalchemy import select
from sqlalchemy.orm import Session

from tpuq.shapes import allowed_chip_counts, family, host_chips, type_error
from tpuq.spec import JobSpec, SpecError
from tpuq.state import teams
from tpuq.state.models import Host, Team, TeamMember


def admit(s: Session, spec: JobSpec, *, admin: bool, open_team: str) -> list[str]:
    """Refuse (SpecError) what cannot run; the warnings for what may wait a long time."""
    if spec.tpu_type is not None:
        error = type_error(spec.tpu_type)
        if error is not None:
            raise SpecError(error)
    _check_team(s, spec, admin=admin, open_team=open_team)
    if spec.workers is not None:
        return _admit_slice_job(s, spec)
    sizes = _host_sizes(s, spec.tpu_type)
    warnings = []
    if not sizes:
        what = f"of type {spec.tpu_type} " if spec.tpu_type else ""
        warnings.append(f"warning: no host {what}has registered yet; the job waits for one")
    per_host = host_chips(spec.tpu_type) if spec.tpu_type else None
    if spec.chips is not None and per_host is not None and spec.chips > per_host:
        raise SpecError(f"a {spec.tpu_type} host has {per_host} chips; "
                        f"--chips {spec.chips} cannot fit")
    _check_chips(spec, sizes)
    _check_caps(s, spec, sizes)
    return warnings


def check_shape(s: Session, spec: JobSpec) -> None:
    """The chip rule alone (a resubmit keeps its team; its shape is checked again)."""
    if spec.workers is None:
        _check_chips(spec, _host_sizes(s, spec.tpu_type))


def _admit_slice_job(s: Session, spec: JobSpec) -> list[str]:
    """A slice job needs every chip of every worker of one slice of its type."""
    assert spec.tpu_type is not None and spec.workers is not None
    per_host = host_chips(spec.tpu_type) or 0
    _check_caps(s, spec, [], need=spec.workers * per_host)
    known = s.execute(select(Host.slice_name).where(Host.slice_type == spec.tpu_type)
                      .limit(1)).first()
    if known is None:
        return [f"warning: no {spec.tpu_type} slice has registered yet (its {spec.workers} "
                "workers' agents register it); the job waits for one"]
    return []


def _host_sizes(s: Session, tpu_type: str | None) -> list[int]:
    q = select(Host.chips).where(Host.slice_name.is_(None))  # slice workers: slice jobs only
    if tpu_type:
        q = q.where(Host.tpu_type == tpu_type)
    return sorted({len(c) for c in s.scalars(q) if c})


def _check_chips(spec: JobSpec, sizes: list[int]) -> None:
    chips, tpu_type = spec.chips, spec.tpu_type
    if chips is None:
        return
    if not sizes or any(chips in allowed_chip_counts(n) for n in sizes):
        return
    where = f" of type {tpu_type}" if tpu_type else ""
    offers = "; ".join(f"{n}-chip hosts allow {', '.join(map(str, allowed_chip_counts(n)))}"
                       for n in sizes)
    raise SpecError(f"no host{where} offers {chips} chip{'s' if chips != 1 else ''}: {offers}")


def _check_team(s: Session, spec: JobSpec, *, admin: bool, open_team: str) -> None:
    if spec.team == open_team:
        return
    if teams.get(s, spec.team) is None:
        names = [t.name for t in teams.all_teams(s)] + [open_team]
        close = difflib.get_close_matches(spec.team, names, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else \
            f"teams: {', '.join(sorted(set(names)))}"
        raise SpecError(f"no team named {spec.team!r} ({hint}); admins make teams "
                        "with `tpuq quota set TEAM` and `tpuq quota add-member TEAM USER`")
    if admin or s.get(TeamMember, (spec.team, spec.owner)) is not None:
        return
    raise SpecError(f"{spec.owner} is not a member of team {spec.team}; an admin adds you "
                    f"with `tpuq quota add-member {spec.team} {spec.owner}`")


def _check_caps(s: Session, spec: JobSpec, sizes: list[int], need: int | None = None) -> None:
    """A job needing more chips at once than a cap of its team allows would never start.
    A whole-host job needs the chips of the smallest host it could run on; a slice job
    (`need` given) every chip of its slice."""
    team = s.get(Team, spec.team)
    if team is None:
        return
    if need is None:
        need = spec.chips if spec.chips is not None else (
            sizes[0] if sizes else (host_chips(spec.tpu_type) if spec.tpu_type else None))
    if need is None:
        return
    caps: list[tuple[int | None, str]] = [
        (team.max_chips, f"team {team.name} may use {team.max_chips} chips at once"),
            (team.max_chips_per_user,
             f"team {team.name} allows {team.max_chips_per_user} chips per user at once")]
    if spec.tpu_type:
        for key, by_type in (team.max_chips_by_type or {}).items():
            if key in (spec.tpu_type, family(spec.tpu_type)):
                caps.append((by_type, f"team {team.name} may use {by_type} {key} chips at once"))
    for cap, said in caps:
        if cap is not None and need > cap:
            whole = "" if spec.chips is not None else \
                f" (a whole {spec.tpu_type} slice)" if spec.workers else " (a whole host)"
            raise SpecError(f"{said}; this job needs {need}{whole}")
