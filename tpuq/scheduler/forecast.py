"""When will each queued job start? The scheduler's own plan, run forward in time (pure).

As SLURM's `squeue --start`: from now, plan a pass with `policy.plan` (the same
filters, order, quotas, reservations and backfill as the leader's pass), start what it
assigns, then jump to the next moment something changes -- a running job reaches its
expected end (its ETA if it reported one, else its time limit), a retry backoff ends --
free those chips and plan again. A job started at step t is expected to start at t; a
job with no --time holds its chips for good in the forecast (nobody can say when it
ends), so the jobs behind it get no estimate, and say so. Jobs a running job waits for
are taken to succeed when it ends.

Bounded: at most `max_steps` passes and `horizon_s` of simulated time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from tpuq.scheduler.fairshare import group_by_team, sort_within_team, teams_in_order
from tpuq.scheduler.policy import plan
from tpuq.scheduler.views import HostView, JobView, TeamView

NO_LIMIT_WORDS = "no estimate: the chips it waits for are held by jobs with no time limit"


@dataclass(frozen=True)
class Holding:
    """Chips a running job holds, and when it should give them back (None: unknown)."""

    job_id: int
    team: str
    user: str
    host: str
    chips: frozenset[int]
    tpu_type: str | None
    ends_at: float | None


@dataclass(frozen=True)
class Start:
    """`at`: expected start (epoch s; None: no estimate); `why`: why it waits now (the
    scheduler's reason), or why no estimate can be given; `position`: where the next
    pass considers it among the queued jobs (1 = first: team fair share, priority, age)."""

    at: float | None
    why: str
    position: int = 0


def expected_starts(jobs: Sequence[JobView], hosts: Sequence[HostView],
                    teams: Mapping[str, TeamView], holdings: Iterable[Holding], now: float,
                    succeeded: frozenset[int] = frozenset(), *, max_steps: int = 48,
                    horizon_s: float = 30 * 86400.0,
                    array_running: Mapping[int, int] = MappingProxyType({}),
                    share_of_limit: Mapping[str, float] = MappingProxyType({})
                    ) -> dict[int, Start]:
    """Every queued job in `jobs`: when it should start, or why no time can be given.
    `share_of_limit`: user -> how much of their time limit their jobs use (from their
    recent history); a queued job is taken to run that share of its limit (all of it
    for a user without history)."""
    sim = _Simulation(hosts, teams, list(holdings), succeeded)
    sim.share = share_of_limit
    queue = list(jobs)
    starts: dict[int, float] = {}
    first: Mapping[int, str] = {}
    t = now
    for step in range(max_steps):
        p = plan(queue, sim.host_views(), sim.team_views(), t, sim.succeeded,
                 array_running=array_running if step == 0 else MappingProxyType({}))
        if step == 0:
            first = p.waiting
        by_id = {j.id: j for j in queue}
        for a in p.assignments:
            starts[a.job_id] = t
            for host, chips in a.workers or ((a.host, a.chips),):  # a slice: every worker
                sim.start(by_id[a.job_id], host, chips, t)
        queue = [j for j in queue if j.id not in starts]
        later = sim.next_event(t, queue)
        if not queue or later is None or later - now > horizon_s:
            break
        t = later
        sim.advance(t)
    rank = {job_id: n for n, job_id in enumerate(consideration_order(jobs, teams), 1)}
    out = {job_id: Start(at, "", rank[job_id]) for job_id, at in starts.items()}
    unknown = sim.unknown_holders()
    for j in queue:
        reason = first.get(j.id, "")
        said = "no time limit" in reason  # the reason already names the cause
        out[j.id] = Start(None, f"{reason}; {NO_LIMIT_WORDS}" if unknown and reason and not said
                          else reason or NO_LIMIT_WORDS, rank[j.id])
    return out


def consideration_order(jobs: Sequence[JobView], teams: Mapping[str, TeamView]) -> list[int]:
    """Job ids in the order a pass considers them (fairshare.py): teams by fair share,
    then priority, age and id within each team."""
    groups = group_by_team(jobs)
    order: list[int] = []
    for name in teams_in_order(groups, teams):
        group = list(groups[name])
        sort_within_team(group)
        order += [j.id for j in group]
    return order


class _Simulation:
    """The hosts, teams and running jobs at the simulated time."""

    def __init__(self, hosts: Sequence[HostView], teams: Mapping[str, TeamView],
                 holdings: list[Holding], succeeded: frozenset[int]) -> None:
        self.hosts = {h.name: h for h in hosts}
        # chips busy at the start that no holding explains stay busy
        held: dict[str, set[int]] = {}
        for h in holdings:
            held.setdefault(h.host, set()).update(h.chips)
        self.stuck = {name: frozenset(h.chips) - h.free - held.get(name, set())
                      for name, h in self.hosts.items()}
        self.teams = dict(teams)
        self.holdings = holdings
        self.succeeded = succeeded
        self.share: Mapping[str, float] = {}

    def host_views(self) -> list[HostView]:
        busy: dict[str, set[int]] = {n: set(s) for n, s in self.stuck.items()}
        free_at: dict[str, dict[int, float]] = {}
        for h in self.holdings:
            busy.setdefault(h.host, set()).update(h.chips)
            if h.ends_at is not None:
                free_at.setdefault(h.host, {}).update(dict.fromkeys(h.chips, h.ends_at))
        return [replace(v, free=frozenset(v.chips) - busy.get(name, set()),
                        free_at=free_at.get(name, {}))
                for name, v in self.hosts.items()]

    def team_views(self) -> dict[str, TeamView]:
        """The teams' running chips as the holdings say (the pass counts its own)."""
        total: dict[str, int] = {}
        by_type: dict[str, dict[str, int]] = {}
        by_user: dict[str, dict[str, int]] = {}
        for h in self.holdings:
            n = len(h.chips)
            total[h.team] = total.get(h.team, 0) + n
            kinds = by_type.setdefault(h.team, {})
            kinds[h.tpu_type or "?"] = kinds.get(h.tpu_type or "?", 0) + n
            users = by_user.setdefault(h.team, {})
            users[h.user] = users.get(h.user, 0) + n
        names = set(self.teams) | set(total)
        return {t: replace(self.teams.get(t) or TeamView(t), running_chips=total.get(t, 0),
                           running_by_type=by_type.get(t, {}), running_by_user=by_user.get(t, {}))
                for t in names}

    def start(self, job: JobView, host: str, chips: tuple[int, ...], t: float) -> None:
        share = min(1.0, max(0.0, self.share.get(job.user, 1.0)))
        end = None if job.time_limit_s is None else t + job.time_limit_s * share
        view = self.hosts.get(host)
        self.holdings.append(Holding(job.id, job.team, job.user, host, frozenset(chips),
                                     view.tpu_type if view else job.tpu_type, end))

    def next_event(self, t: float, queue: Sequence[JobView]) -> float | None:
        times = [h.ends_at for h in self.holdings if h.ends_at is not None and h.ends_at > t]
        times += [j.not_before for j in queue if j.not_before is not None and j.not_before > t]
        return min(times, default=None)

    def advance(self, t: float) -> None:
        done = [h for h in self.holdings if h.ends_at is not None and h.ends_at <= t]
        self.holdings = [h for h in self.holdings if h.ends_at is None or h.ends_at > t]
        self.succeeded = self.succeeded | {h.job_id for h in done}

    def unknown_holders(self) -> bool:
        return any(h.ends_at is None for h in self.holdings) or any(self.stuck.values())
