"""Fair-share ordering and usage decay (pure, stdlib only).

Order among eligible jobs (DESIGN.md "Scheduling and quotas"): team fair share first
(lowest decayed usage per unit of share goes first), then priority (higher first), then
age (older first), then job id. Team rank is fixed for one planning pass: the caller
recomputes usage between passes, so we do not charge the chip-hours of jobs the pass
assigns.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from operator import attrgetter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tpuq.scheduler.policy import JobView, TeamView

# attrgetter keys run in C; two stable sorts beat one sort on a Python-built tuple key
# by ~3x for 100k jobs (see bench/bench_policy.py).
_AGE_KEY = attrgetter("submitted_at", "id")
_PRIO_KEY = attrgetter("priority")


def decay(usage: float, elapsed_s: float, half_life_s: float) -> float:
    """Usage after `elapsed_s` of exponential decay with the given half-life.

    A non-positive half-life means "no memory" (0.0); non-positive elapsed time leaves
    usage unchanged, so a clock step backwards never inflates usage.
    """
    if elapsed_s <= 0:
        return usage
    if half_life_s <= 0:
        return 0.0
    if math.isinf(half_life_s):
        return usage
    return usage * math.pow(0.5, elapsed_s / half_life_s)


def team_rank(team: str, teams: Mapping[str, TeamView]) -> tuple[float, str]:
    """Sort key of a team: usage/share, then name so ties are deterministic.

    Unknown teams rank as usage 0 (they have not run anything we know of); a share of
    0 or less sends the team behind everyone with a positive share.
    """
    view = teams.get(team)
    if view is None:
        return (0.0, team)
    if view.share <= 0:
        return (math.inf, team)
    return (view.usage / view.share, team)


def group_by_team(jobs: Iterable[JobView]) -> dict[str, list[JobView]]:
    groups: defaultdict[str, list[JobView]] = defaultdict(list)
    for job in jobs:
        groups[job.team].append(job)
    return groups


def teams_in_order(teams_present: Iterable[str], teams: Mapping[str, TeamView]) -> list[str]:
    return sorted(teams_present, key=lambda name: team_rank(name, teams))


def sort_within_team(jobs: list[JobView]) -> None:
    """In place: priority desc, then submitted_at asc, then id asc.

    Python's sort is stable (also with reverse=True), so sorting by the minor key first
    and the major key second yields the lexicographic order.
    """
    jobs.sort(key=_AGE_KEY)
    jobs.sort(key=_PRIO_KEY, reverse=True)


def order(jobs: Iterable[JobView], teams: Mapping[str, TeamView], now: float) -> list[JobView]:
    """All `jobs` in the order `plan` considers them (filters are applied by `plan`).

    `now` is accepted for interface stability; the order itself does not depend on it.
    """
    del now
    groups = group_by_team(jobs)
    out: list[JobView] = []
    for name in teams_in_order(groups, teams):
        group = groups[name]
        sort_within_team(group)
        out.extend(group)
    return out
