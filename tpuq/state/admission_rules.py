"""Admission's rules, on the facts a submit reads: what cannot ever run is refused in one
line, what may wait long is warned of.

A job is refused when its TPU type does not exist, when no registered host of its type
has the chips it asks for, when it needs more chips at once than its team's caps allow,
or when its team does not exist or the owner is not a member. Teams are made by admins
(`tpuq quota set`, `tpuq quota add-member`); the deployment's default team is open to all.
Before any host (of the type asked) has registered, a submit is accepted with a warning:
there is nothing yet to check the chips against.

The facts are read in one of two ways, and only read here never: through SQLAlchemy
(state/admission.py) and, for a team submit from a machine with no agent, through psycopg
alone (state/pgsubmit.py). Neither this module nor its imports load SQLAlchemy.
"""

from __future__ import annotations

from tpuq.records import Record, field
from tpuq.shapes import allowed_chip_counts, family, host_chips, type_error
from tpuq.spec import JobSpec, SpecError


class TeamCaps(Record, frozen=True):
    """A team's row: its caps on chips at once (None: no cap)."""

    name: str
    max_chips: int | None = None
    max_chips_per_user: int | None = None
    max_chips_by_type: dict[str, int] = field(default_factory=dict)


class Facts(Record):
    """What admission looks at, as the submit's transaction read it."""

    team: TeamCaps | None = None  # the job's team's row (none: no caps)
    member: bool = False  # the owner is a member of the job's team
    # the chip counts of the hosts of the job's type that are not slice workers (a slice
    # job: unread); empty before any registered
    sizes: list[int] = []
    slice_known: bool = False  # a slice job: a slice of its type has registered
    team_names: list[str] = []  # every team's name (read only when the job's is unknown)


def needs_team_names(spec: JobSpec, team: TeamCaps | None, open_team: str) -> bool:
    """The names of every team are read only for the hint of an unknown team's refusal."""
    return team is None and spec.team != open_team


def needs_member(spec: JobSpec, team: TeamCaps | None, *, admin: bool, open_team: str) -> bool:
    return not admin and team is not None and spec.team != open_team


def decide(spec: JobSpec, facts: Facts, *, admin: bool, open_team: str) -> list[str]:
    """Refuse (SpecError) what cannot run; the warnings for what may wait a long time."""
    if spec.tpu_type is not None:
        error = type_error(spec.tpu_type)
        if error is not None:
            raise SpecError(error)
    _check_team(spec, facts, admin=admin, open_team=open_team)
    if spec.workers is not None:
        return _admit_slice_job(spec, facts)
    sizes = facts.sizes
    warnings = []
    if not sizes:
        what = f"of type {spec.tpu_type} " if spec.tpu_type else ""
        warnings.append(f"warning: no host {what}has registered yet; the job waits for one")
    per_host = host_chips(spec.tpu_type) if spec.tpu_type else None
    if spec.chips is not None and per_host is not None and spec.chips > per_host:
        raise SpecError(f"a {spec.tpu_type} host has {per_host} chips; "
                        f"--chips {spec.chips} cannot fit")
    check_chips(spec, sizes)
    _check_caps(spec, facts.team, sizes)
    return warnings


def sizes_of(chip_lists: list[list[int] | None]) -> list[int]:
    """The distinct host sizes, smallest first, from each host's chips."""
    return sorted({len(c) for c in chip_lists if c})


def _admit_slice_job(spec: JobSpec, facts: Facts) -> list[str]:
    """A slice job needs every chip of every worker of one slice of its type."""
    assert spec.tpu_type is not None and spec.workers is not None
    per_host = host_chips(spec.tpu_type) or 0
    _check_caps(spec, facts.team, [], need=spec.workers * per_host)
    if not facts.slice_known:
        return [f"warning: no {spec.tpu_type} slice has registered yet (its {spec.workers} "
                "workers' agents register it); the job waits for one"]
    return []


def check_chips(spec: JobSpec, sizes: list[int]) -> None:
    chips, tpu_type = spec.chips, spec.tpu_type
    if chips is None:
        return
    if not sizes or any(chips in allowed_chip_counts(n) for n in sizes):
        return
    where = f" of type {tpu_type}" if tpu_type else ""
    offers = "; ".join(f"{n}-chip hosts allow {', '.join(map(str, allowed_chip_counts(n)))}"
                       for n in sizes)
    raise SpecError(f"no host{where} offers {chips} chip{'s' if chips != 1 else ''}: {offers}")


def _check_team(spec: JobSpec, facts: Facts, *, admin: bool, open_team: str) -> None:
    import difflib

    if spec.team == open_team:
        return
    if facts.team is None:
        names = facts.team_names + [open_team]
        close = difflib.get_close_matches(spec.team, names, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else \
            f"teams: {', '.join(sorted(set(names)))}"
        raise SpecError(f"no team named {spec.team!r} ({hint}); admins make teams "
                        "with `tpuq quota set TEAM` and `tpuq quota add-member TEAM USER`")
    if admin or facts.member:
        return
    raise SpecError(f"{spec.owner} is not a member of team {spec.team}; an admin adds you "
                    f"with `tpuq quota add-member {spec.team} {spec.owner}`")


def _check_caps(spec: JobSpec, team: TeamCaps | None, sizes: list[int],
                need: int | None = None) -> None:
    """A job needing more chips at once than a cap of its team allows would never start.
    A whole-host job needs the chips of the smallest host it could run on; a slice job
    (`need` given) every chip of its slice."""
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
