"""Placement and ordering policy: inputs in, decisions out (no I/O, stdlib only).

One `plan()` call is one pass of the scheduler leader loop:

1. Filters: retry backoff (`not_before`), unmet dependencies, a shape no host
   offers, team quotas (grant, budget, concurrent chips, per type, per user).
2. Order (see fairshare.py): team fair share, then priority, age, id. Team rank is fixed
   for the pass; quota counters are updated after every assignment of the pass.
3. Placement (see hostpool.py): best fit on aligned chip blocks.

Reservations and backfill (SLURM's backfill rule): the pass is work-conserving -- when a
job finds no room, later (smaller) jobs may still take free chips -- but a job that
cannot fit reserves, at once, the host where it will fit soonest: the earliest estimated
start from the busy chips' time limits (a chip whose job has no limit frees at an unknown
time), then the fewest busy chips. A later job of the pass takes chips on a reserved host
only if its own time limit ends before that estimated start (it backfills); jobs without
a limit never do. Jobs ordered before the holder still may (the ordering decides who
goes first). At most `max_reservations` hosts are reserved per pass, to bound the chips
left idle; 1-chip jobs never reserve (any freed chip fits them). Reservations are not
stored: every pass makes them again from the same inputs. Once the only free chips are
on reserved hosts, a team none of whose jobs has a time limit is passed over unsorted:
nothing of its backlog could take them.

Waiting reasons describe the state after applying the plan, and are computed lazily when
`Plan.waiting` is read (a 100k-job queue would otherwise cost more than the pass itself);
results are shared per (team, user, type, size) so reading all of them stays cheap.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from operator import attrgetter
from types import MappingProxyType

from tpuq.scheduler.fairshare import group_by_team, sort_within_team, teams_in_order
from tpuq.scheduler.hostpool import INF, WHOLE, Host, Pool, need_key
from tpuq.scheduler.quota import TeamState, clock
from tpuq.scheduler.slicepool import SlicePool
from tpuq.scheduler.views import Assignment, HostView, JobView, Plan, TeamView
from tpuq.shapes import host_chips

_LIMIT = attrgetter("time_limit_s")
_NO_LIMIT = frozenset({None})

__all__ = ["Assignment", "HostView", "JobView", "Plan", "TeamView", "plan"]


def plan(
    jobs: Sequence[JobView],
    hosts: Sequence[HostView],
    teams: Mapping[str, TeamView],
    now: float,
    succeeded: frozenset[int] = frozenset(),
    *,
    reserve_after_s: float = 0.0,
    max_reservations: int = 4,
    array_running: Mapping[int, int] = MappingProxyType({}),
    tasks: Mapping[int, tuple[int, int]] = MappingProxyType({}),
) -> Plan:
    """Decide which queued jobs start now and where; say why the others wait.
    `array_running`: tasks of throttled arrays running now (by array id); `tasks`: the
    jobs waited for that are array tasks, as (array id, index), for the reasons' words."""
    planner = _Planner(hosts, teams, now, succeeded, reserve_after_s, max_reservations)
    planner.array_running = dict(array_running)
    planner.tasks = tasks
    planner.run(jobs)
    return Plan(
        assignments=tuple(planner.assignments),
        waiting=_Waiting(planner, jobs),
        reserved=MappingProxyType(dict(planner.pool.reserved)),
    )


class _Planner:
    def __init__(
        self,
        hosts: Sequence[HostView],
        teams: Mapping[str, TeamView],
        now: float,
        succeeded: frozenset[int],
        reserve_after_s: float,
        max_reservations: int,
    ) -> None:
        self.pool = Pool(h for h in hosts if h.slice is None)
        self.slices = SlicePool(hosts)
        self.teams = teams
        self.now = now
        self.succeeded = succeeded
        self.reserve_after_s = reserve_after_s
        self.max_reservations = max_reservations
        self.states: dict[str, TeamState] = {}
        self.assignments: list[Assignment] = []
        self.assigned: set[int] = set()
        self.reserved_for: dict[int, str] = {}  # job id -> host name
        self.starts: dict[int, float] = {}  # job id -> its reservation's estimated start
        self.array_running: dict[int, int] = {}  # array id -> tasks running (throttles)
        self.tasks: Mapping[int, tuple[int, int]] = MappingProxyType({})
        self.memo: dict[tuple[object, ...], str] = {}

    def state(self, team: str) -> TeamState:
        ts = self.states.get(team)
        if ts is None:
            ts = self.states[team] = TeamState(self.teams.get(team) or TeamView(team), self.now)
        return ts

    def run(self, jobs: Sequence[JobView]) -> None:
        groups = group_by_team(jobs)
        for name in teams_in_order(groups, self.teams):
            if not self.pool.fit and not self.slices.free:
                if not self.pool.backfillable:
                    return  # no free chip anywhere: the rest only needs reasons (lazy)
                if _NO_LIMIT.issuperset(map(_LIMIT, groups[name])):
                    continue  # only reserved chips are free, and no job here can backfill
            ts = self.state(name)
            if ts.full():
                continue  # sorting a blocked team's backlog would be wasted work
            group = groups[name]
            sort_within_team(group)
            self._scan_team(ts, group)

    def _scan_team(self, ts: TeamState, group: list[JobView]) -> None:
        # Hot loop: cheapest rejections first; reasons are produced later by explain().
        pool, now, succeeded, offered = self.pool, self.now, self.succeeded, self.pool.offered
        for job in group:
            if job.not_before is not None and job.not_before > now:
                continue
            if job.depends_on and not succeeded.issuperset(job.depends_on):
                continue
            if job.array_throttle is not None and job.array_id is not None and \
                    self.array_running.get(job.array_id, 0) >= job.array_throttle:
                continue
            if job.home is not None:
                at_home = self._at_home(job, ts)
                if at_home is not None:  # placed with its checkpoints, or waits for them
                    if at_home and ts.full():
                        return
                    continue
            if job.workers is not None:
                if self._try_slice(job, ts) and ts.full():
                    return
                continue
            need = need_key(job.chips)
            if (job.tpu_type, need) not in offered:
                continue
            if not pool.has_room(job.tpu_type, need):
                # most of a long backlog: no limit to backfill with, nothing to reserve
                if job.time_limit_s is None and (
                        need == 1 or len(self.reserved_for) >= self.max_reservations):
                    continue
                if not self._try_backfill(job, ts, need) \
                        and not self._maybe_reserve(job, ts, need):
                    continue
            elif not self._try_place(job, ts, need):
                continue
            # chips were taken or reserved: the team may be at its cap, the pool full
            if ts.full() or not pool.fit and not pool.backfillable and not self.slices.free:
                return

    def _try_place(self, job: JobView, ts: TeamState, need: int) -> bool:
        user, est = job.user, job.est_hours
        if job.tpu_type is not None and need != WHOLE:
            if ts.check(user, need, job.tpu_type, est) is not None:
                return False
            host = self.pool.best(job.tpu_type, need, None)
        else:  # the chip count or the type caps depend on the host: check per candidate
            host = self.pool.best(
                job.tpu_type, need, lambda t, size: ts.check(user, size, t, est) is None
            )
        return self._assign(job, ts, host, need)

    def _assign(self, job: JobView, ts: TeamState, host: Host | None, need: int) -> bool:
        if host is None:
            return False
        chips = self.pool.take(host, need)
        ts.add(job.user, len(chips), host.type, job.est_hours)
        self.assignments.append(Assignment(job.id, host.name, chips))
        self.assigned.add(job.id)
        if job.array_id is not None:
            self.array_running[job.array_id] = self.array_running.get(job.array_id, 0) + 1
        return True

    def _at_home(self, job: JobView, ts: TeamState) -> bool | None:
        """A job whose checkpoints are on one host's disk (a slice job's: one slice's):
        True when placed there, False when it waits for it (while that host is expected
        back, until `home_until`), None when it goes wherever there is room (the host is
        gone or draining, or the wait is over: it starts over there)."""
        assert job.home is not None
        user, est = job.user, job.est_hours
        if job.workers is not None:
            sl = self.slices.named(job.home)
            if sl is None or sl.draining() or sl.type != job.tpu_type:
                return None
            if not sl.taken and sl.usable() and \
                    ts.check(user, sl.chips, sl.type, est) is None:
                ts.add(user, sl.chips, sl.type, est)
                self.assignments.append(Assignment(job.id, sl.name, tuple(range(sl.chips)),
                                                   self.slices.take(sl)))
                self.assigned.add(job.id)
                return True
        else:
            h = self.pool.named.get(job.home)
            need = need_key(job.chips)
            if h is None or h.draining or job.tpu_type not in (None, h.type) \
                    or h.size_for(need) not in h.allowed:
                return None
            if self.pool.takes_at(h, job.tpu_type, need) and \
                    ts.check(user, h.size_for(need), h.type, est) is None:
                return self._assign(job, ts, h, need)
        return False if self._waits_for_home(job) else None

    def _waits_for_home(self, job: JobView) -> bool:
        return job.home_until is not None and self.now < job.home_until

    def _try_slice(self, job: JobView, ts: TeamState) -> bool:
        """Every worker of one free slice of the job's type, or nothing."""
        user, est, kind = job.user, job.est_hours, job.tpu_type
        sl = self.slices.find(kind, lambda chips: ts.check(user, chips, kind, est) is None)
        if sl is None:
            return False
        ts.add(user, sl.chips, kind, est)
        self.assignments.append(Assignment(job.id, sl.name, tuple(range(sl.chips)),
                                           self.slices.take(sl)))
        self.assigned.add(job.id)
        return True

    def _try_backfill(self, job: JobView, ts: TeamState, need: int) -> bool:
        """A job with a time limit that ends before a reservation starts may use the
        reserved host's free chips meanwhile."""
        if job.time_limit_s is None or not self.pool.reserved_hosts:
            return False
        user, est = job.user, job.est_hours
        host = self.pool.backfill(job.tpu_type, need, self.now + job.time_limit_s,
                                  lambda t, size: ts.check(user, size, t, est) is None)
        return self._assign(job, ts, host, need)

    def _maybe_reserve(self, job: JobView, ts: TeamState, need: int) -> bool:
        """Reserve the host where `job` will start soonest; True when it did."""
        if need == 1 or len(self.reserved_for) >= self.max_reservations:
            return False
        if self.now - job.submitted_at < self.reserve_after_s or job.id in self.reserved_for:
            return False
        user, est = job.user, job.est_hours
        found = self.pool.drain_candidate(
            job.tpu_type, need, lambda t, size: ts.check(user, size, t, est) is None, self.now
        )
        if found is not None:
            host, start = found
            self.pool.reserve(host, job.id, job.submitted_at, start)
            self.reserved_for[job.id] = host.name
            self.starts[job.id] = start
        return found is not None

    def explain(self, job: JobView) -> str:
        """Why `job` is not assigned, judged on the state after the pass."""
        need = need_key(job.chips)
        if job.workers is None and (job.tpu_type, need) not in self.pool.offered:
            return f"no host offers {_shape_words(job.chips, job.tpu_type)}"
        if job.begin_at is not None and job.begin_at > self.now:
            return f"begins at {_when(job.begin_at, self.now)} (--begin)"
        if job.not_before is not None and job.not_before > self.now:
            return f"retry backoff until {clock(job.not_before, '%H:%M:%S')}"
        if job.depends_on:
            unmet = [d for d in job.depends_on if d not in self.succeeded]
            if unmet:
                return "waiting for " + _dependency_words(unmet, self.tasks)
        if job.array_throttle is not None and job.array_id is not None and \
                self.array_running.get(job.array_id, 0) >= job.array_throttle:
            return f"array {job.array_id} at its limit of {job.array_throttle} running"
        if job.home is not None and job.home_until is not None and self._waits_for_home(job) \
                and self._home_expected(job):
            return (f"waiting for {job.home}, which holds its checkpoints (until "
                    f"{clock(job.home_until, '%H:%M:%S')}; then it starts over elsewhere)")
        if job.workers is not None:
            return self._slice_words(job)
        host = self.reserved_for.get(job.id)
        if host is not None:
            return f"{host} reserved for it, {self._start_words(self.starts[job.id])}"
        key = (job.team, job.user, job.tpu_type, need, job.est_hours)
        reason = self.memo.get(key)
        if reason is None:
            reason = self.memo[key] = self._explain_shape(job, need)
        return reason

    def _explain_shape(self, job: JobView, need: int) -> str:
        ts, pool = self.state(job.team), self.pool
        types = pool.types if job.tpu_type is None else [job.tpu_type]
        with_room = [t for t in types if (t, need) in pool.fit]
        if with_room:
            reasons = [self._quota_on(job, ts, t, need) for t in with_room]
            if not all(reasons):
                return "not reached in this pass"  # cannot happen: the scan stops only when full
            return self._reserved_words(job, ts, need) or reasons[0] or ""
        size = pool.min_whole[job.tpu_type] if need == WHOLE else need
        reason = ts.check(job.user, size, job.tpu_type, job.est_hours)
        return reason or self._reserved_words(job, ts, need) or self._capacity_words(job, need)

    def _home_expected(self, job: JobView) -> bool:
        assert job.home is not None
        if job.workers is not None:
            sl = self.slices.named(job.home)
            return sl is not None and not sl.draining()
        h = self.pool.named.get(job.home)
        return h is not None and not h.draining

    def _slice_words(self, job: JobView) -> str:
        chips = (job.workers or 0) * (host_chips(job.tpu_type or "") or 0)
        reason = self.state(job.team).check(job.user, chips, job.tpu_type, job.est_hours)
        return reason or self.slices.why_not(job.tpu_type)

    def _quota_on(self, job: JobView, ts: TeamState, t: str | None, need: int) -> str | None:
        buckets = self.pool.fit[(t, need)]
        sizes = sorted(buckets) if need == WHOLE else [need]
        reasons = [ts.check(job.user, size, t, job.est_hours) for size in sizes]
        return None if not all(reasons) else reasons[0]

    def _reserved_words(self, job: JobView, ts: TeamState, need: int) -> str | None:
        """Blame a reservation if the job would otherwise fit on a reserved host."""
        for h, holder, _since, start in self.pool.reserved_hosts:
            if job.tpu_type not in (None, h.type) or not h.has_block(need):
                continue
            if ts.check(job.user, h.size_for(need), h.type, job.est_hours) is None:
                hint = "" if start == INF else \
                    f"; a job whose --time ends by {clock(start, '%H:%M')} may use it"
                return f"{h.name} reserved for job {holder}{hint}"
        return None

    def _start_words(self, start: float) -> str:
        if start == INF:
            return "start unknown (running jobs there have no time limit)"
        return "starts now" if start <= self.now else f"starts by {clock(start, '%H:%M')}"

    def _capacity_words(self, job: JobView, need: int) -> str:
        out = self.pool.out_of_service(job.tpu_type, need)
        if out is not None:
            return f"no host in service: {out}"
        if need == WHOLE:
            return f"waiting for a free {job.tpu_type + ' ' if job.tpu_type else ''}host"
        where = f" on a {job.tpu_type} host" if job.tpu_type else ""
        return f"waiting for {need} free chip{'s' if need > 1 else ''}{where}"

    def _mins(self, since: float) -> str:
        return f"{max(0, int((self.now - since) // 60))} min"


def _shape_words(chips: int | None, tpu_type: str | None) -> str:
    if chips is None:
        return f"a whole {tpu_type} host" if tpu_type else "a whole host"
    what = f"{chips} chip{'s' if chips != 1 else ''}"
    return f"{what} of {tpu_type}" if tpu_type else what


def _when(at: float, now: float) -> str:
    """A time people read: 22:00 today, or with its date when it is not within a day."""
    return clock(at, "%H:%M" if at - now < 86400 else "%Y-%m-%d %H:%M")


def _dependency_words(unmet: Sequence[int], tasks: Mapping[int, tuple[int, int]]) -> str:
    """`job 12`, `jobs 12, 13`, `task 54_2`, `array 54 (tasks 1-3)`: the tasks of one
    array it waits for, named by the array (status and show say which)."""
    from tpuq.arrays import compress

    plain = [str(d) for d in unmet if d not in tasks]
    by_array: dict[int, list[int]] = {}
    for d in unmet:
        if d in tasks:
            by_array.setdefault(tasks[d][0], []).append(tasks[d][1])
    words = [f"job{'s' if len(plain) > 1 else ''} {', '.join(plain)}"] if plain else []
    for array_id, indices in sorted(by_array.items()):
        words.append(f"task {array_id}_{indices[0]}" if len(indices) == 1 else
                     f"array {array_id} (tasks {compress(indices)})")
    return ", ".join(words)


class _Waiting(Mapping[int, str]):
    """job id -> reason for every job not assigned; reasons computed on first read."""

    def __init__(self, planner: _Planner, jobs: Sequence[JobView]) -> None:
        self._planner = planner
        self._jobs = jobs
        self._index: dict[int, JobView] | None = None

    def _idx(self) -> dict[int, JobView]:
        if self._index is None:
            assigned = self._planner.assigned
            self._index = {j.id: j for j in self._jobs if j.id not in assigned}
        return self._index

    def __getitem__(self, job_id: int) -> str:
        return self._planner.explain(self._idx()[job_id])

    def __iter__(self) -> Iterator[int]:
        return iter(self._idx())

    def __len__(self) -> int:
        return len(self._idx())

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._idx()

    def __repr__(self) -> str:
        return f"<waiting: {len(self)} jobs>"
