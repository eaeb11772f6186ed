"""The leader's scheduling pass: read a snapshot, ask the pure policy, apply its plan;
and the lease that makes an agent the leader. (The leader's other duty, requeueing the
jobs of hosts that stopped renewing their leases, is scheduler/reaper.py.)

Everything happens in one write transaction under the leader lease: the snapshot, the
plan and every `queued -> assigned` change with its chip rows. Hosts are told to start
(`dispatch`) only after the commit, so a host never hears of an assignment that did not
happen. The leader's own host's starts (`OwnStarts`, the agent's executor) are written in
that transaction too, `assigned -> running` beside the assignment, and the processes
spawned once it committed: one commit where there were two.

Leadership is a lease row (state/leader.py) of `TPUQ_LEADER_LEASE_S`, short and apart
from the job leases: every agent asks for it every third of its length (`keep_lease`, its
own ticker, not the passes, whose rate varies), so a dead leader is replaced within 4/3
of a lease; a stopping one releases it and offers it to the others at once. A leader plans
only while its last renewal, counted from when it asked, is younger than the lease: one
frozen past its lease plans nothing before it renews or learns another leads. Should two
agents still plan at once, the database keeps them apart (a chip row's primary key, the
compare-and-set on each job's attempt): leadership is for efficiency, not for safety.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from sqlalchemy.orm import Session

from tpuq import checkpoints
from tpuq.scheduler import forecast, policy
from tpuq.settings import Settings
from tpuq.state import attempts, deps, gangs, holdings, leader, queries, snapshot, usage
from tpuq.state.db import Database

log = logging.getLogger("tpuq.scheduler")
ROLE = leader.SCHEDULER
# Chip-hour usage (fair share, budgets) is recomputed at most this often: it scans recent
# attempts, and a pass runs after every finished job. Chips in use are always fresh.
USAGE_TTL_S = 10.0
Dispatch = Callable[[str, int, int], None]  # tell host to start (job_id, attempt)
Notify = Callable[[], None]


class OwnStarts(Protocol):
    """How the leader starts what a pass gives its own host (the agent's executor):
    `begin_start` in the pass's transaction, the attempt's `assigned -> running` beside
    its assignment (a token; None leaves the attempt to the usual dispatch), then
    `finish_start` once that transaction committed (the process spawned), or
    `abandon_start` when it did not."""

    def begin_start(self, s: Session, job_id: int, attempt: int) -> Any: ...

    def finish_start(self, token: Any) -> object: ...

    def abandon_start(self, token: Any) -> None: ...


# queued job id -> (its snapshot row, the jobs it waited for, its view), kept between the
# passes of one scheduler: a deep queue changes little from one pass to the next
ViewCache = dict[int, tuple[snapshot.QueuedRow, tuple[int, ...], policy.JobView]]


def job_views(snap: snapshot.Snapshot, cache: ViewCache | None = None) -> list[policy.JobView]:
    """A view of each queued job; one whose row and dependencies are equal to those
    cached is the cached view (the row holds every column a view is made of)."""
    out = []
    for r in snap.queued:
        unmet = snap.unmet.get(r.id, ())
        hit = cache.get(r.id) if cache is not None else None
        if hit is not None and (hit[0] is r or hit[0] == r) and hit[1] == unmet:
            out.append(hit[2])
            continue
        view = policy.JobView(id=r.id, team=r.team, user=r.owner, priority=r.priority,
                              submitted_at=r.submitted_at, chips=r.chips, tpu_type=r.tpu_type,
                              not_before=_later(r.not_before, r.begin_at),
                              begin_at=r.begin_at, depends_on=unmet,
                              est_hours=(r.time_limit_s or 0.0) / 3600.0,
                              time_limit_s=r.time_limit_s, array_id=r.array_id,
                              array_throttle=r.array_throttle, workers=r.workers)
        if cache is not None:
            cache[r.id] = (r, unmet, view)
        out.append(view)
    if cache is not None:
        snapshot.prune(cache, out)
    return out


def views(snap: snapshot.Snapshot, checkpoint_wait_s: float = 0.0,
          cache: ViewCache | None = None
          ) -> tuple[list[policy.JobView], list[policy.HostView], dict[str, policy.TeamView]]:
    """`checkpoint_wait_s`: how long a job waits for the host holding its checkpoints
    (Settings.checkpoint_wait_s), from the end of its last attempt. `cache`: the job
    views of the last pass (job_views)."""
    jobs = job_views(snap, cache)
    if snap.left_home:  # the few whose checkpoints are on one host's disk: they prefer it
        jobs = [_homed(j, snap.left_home[j.id], r, checkpoint_wait_s)
                if j.id in snap.left_home else j for j, r in zip(jobs, snap.queued)]
    hosts = [policy.HostView(name=name, tpu_type=tpu_type, chips=chips,
                             free=frozenset(chips) - snap.used.get(name, set()),
                             schedulable=why is None, out_of_service=why or "",
                             free_at=snap.ends.get(name, {}),
                             slice=member[0] if member else None,
                             worker=member[1] if member else 0,
                             slice_type=member[2] if member else None, withheld=withheld,
                             draining=name in snap.draining)
             for name, tpu_type, chips, why, member, withheld in snap.hosts]
    names = set(snap.team_running) | set(snap.teams) | set(snap.usage)
    return jobs, hosts, {t: team_view(snap, t) for t in names}


def _later(a: float | None, b: float | None) -> float | None:
    """The later of two times either of which may be None (retry backoff, --begin)."""
    return b if a is None else a if b is None else max(a, b)


def _homed(job: policy.JobView, left: float, row: snapshot.QueuedRow,
           wait_s: float) -> policy.JobView:
    """A queued job whose checkpoints are on one host's disk, seen to hold something
    (snapshot.left_home): it prefers that host, and waits for it `wait_s` from the end
    of its last attempt (`left`)."""
    return dataclasses.replace(job, home=row.checkpoint_host, home_until=left + wait_s)


def team_view(snap: snapshot.Snapshot, name: str) -> policy.TeamView:
    """Running chips, limits and usage of one team, as the policy wants them."""
    n, by_type, by_user = snap.team_running.get(name, (0, {}, {}))
    use = snap.usage.get(name)
    row = snap.teams.get(name)
    if row is None:
        return policy.TeamView(name=name, usage=use.decayed if use else 0.0, running_chips=n,
                               running_by_type=by_type, running_by_user=by_user)
    budget_left = resets = None
    if row.budget_chip_hours is not None:
        budget_left = row.budget_chip_hours - (use.period if use else 0.0)
        resets = usage.period_end(snap.now, row.budget_period)
    return policy.TeamView(
        name=name, share=row.share, usage=use.decayed if use else 0.0, running_chips=n,
        running_by_type=by_type, running_by_user=by_user, max_chips=row.max_chips,
        max_chips_by_type=dict(row.max_chips_by_type or {}),
        max_chips_per_user=row.max_chips_per_user, budget_left=budget_left,
        budget_resets_at=resets, grant_expires_at=row.grant_expires_at,
        budget_period=usage.PERIOD_WORDS.get(row.budget_period, row.budget_period))


def plan_for(s: Session, settings: Settings, recent_usage: dict[str, usage.Usage] | None = None,
             cache: ViewCache | None = None) -> tuple[snapshot.Snapshot, policy.Plan]:
    snap = snapshot.read(s, settings.host_stale_s, settings.fair_share_half_life_h,
                         recent_usage)
    return snap, plan_snapshot(snap, settings, cache)


def plan_snapshot(snap: snapshot.Snapshot, settings: Settings,
                  cache: ViewCache | None = None) -> policy.Plan:
    jobs, hosts, teams = views(snap, settings.checkpoint_wait_s, cache)
    return policy.plan(jobs, hosts, teams, snap.now, array_running=snap.array_running,
                       tasks=snap.unmet_tasks)


class Scheduler:
    def __init__(self, db: Database, settings: Settings, holder: str,
                 dispatch: Dispatch, on_lead: Notify = lambda: None,
                 own: OwnStarts | None = None) -> None:
        self.db = db
        self.settings = settings
        self.holder = holder
        self.dispatch = dispatch
        self.own = own  # starts on the leader's own host, in the pass's transaction
        self.on_lead = on_lead  # called when this agent becomes the leader
        self.leading = False
        # monotonic time at which the last successful renewal was asked for
        self._renewed_at = float("-inf")
        self._usage: dict[str, usage.Usage] | None = None
        self._usage_at = float("-inf")
        # why this agent may not lead at all: its code is older than the database's schema
        self.barred: str | None = None
        # passes while leading: count, total and last seconds (recorded with the lease)
        self.passes: tuple[int, float, float | None] = (0, 0.0, None)
        self._instance: str | None = None  # the database's id (checkpoint directories)
        self._views: ViewCache = {}
        self._queue: snapshot.QueueCache = {}

    def run_pass(self) -> int:
        """One pass; returns how many jobs were assigned."""
        started: list[tuple[str, int, int]] = []
        here: list[object] = []  # started on this host in the pass's own transaction
        if not self.has_lease():
            return 0
        began = time.monotonic()
        own = self.own
        try:
            self._plan_and_assign(started, here)
        except BaseException:
            if own is not None:
                for token in here:
                    own.abandon_start(token)  # the transaction did not commit: nothing started
            raise
        took = time.monotonic() - began
        self.passes = (self.passes[0] + 1, self.passes[1] + took, took)
        try:
            # this host last: its own starts run here, the other hosts' are one message each
            for host, job_id, n in sorted(started, key=lambda t: t[0] == self.holder):
                self.dispatch(host, job_id, n)
        finally:
            if own is not None:
                _finish_each(own, here)
        return len(started) + len(here)

    def _plan_and_assign(self, started: list[tuple[str, int, int]], here: list[object]
                         ) -> None:
        """The pass's transaction: the snapshot, the plan, each assignment; what to tell
        each host goes into `started`, the starts on this host begun in the transaction
        (OwnStarts.begin_start: one commit for both, not one each) into `here`."""
        with self.db.write() as s:
            fresh = time.monotonic() - self._usage_at < USAGE_TTL_S
            snap = snapshot.read(s, self.settings.host_stale_s,
                                 self.settings.fair_share_half_life_h,
                                 self._usage if fresh else None, self._queue)
            if snap.doomed:  # cancelled before the plan, which then never sees them
                doomed = set(deps.cancel_doomed(s, snap.doomed))
                if doomed:
                    log.info("cancelled jobs %s: a job they wait for did not succeed",
                             sorted(doomed))
                    snap.queued = [r for r in snap.queued if r.id not in doomed]
            plan = plan_snapshot(snap, self.settings, self._views)
            if not fresh:
                self._usage, self._usage_at = snap.usage, time.monotonic()
            assigned = {a.job_id for a in plan.assignments}
            queued = {r.id: r for r in snap.queued if r.id in assigned} if assigned else {}
            for a in plan.assignments:
                row = queued[a.job_id]
                where = self._checkpoints(s, snap, row, a)
                if a.workers:  # a slice job: every worker is told
                    n = gangs.assign(s, a.job_id, row.attempt, a.host, a.workers,
                                     self.settings.lease_s, checkpoint=where)
                    started += [(host, a.job_id, n) for host, _ in a.workers] if n else []
                    continue
                n = attempts.assign(s, a.job_id, row.attempt, a.host, a.chips,
                                    self.settings.lease_s, checkpoint=where)
                if n is None:
                    continue
                token = self.own.begin_start(s, a.job_id, n) \
                    if self.own is not None and a.host == self.holder else None
                if token is None:
                    started.append((a.host, a.job_id, n))
                else:
                    here.append(token)

    def _checkpoints(self, s: Session, snap: snapshot.Snapshot, row: snapshot.QueuedRow,
                     a: policy.Assignment) -> checkpoints.Placement:
        """Where the assigned attempt keeps its checkpoints, from the host's registration
        (a slice's: worker 0's) and where the job's were; and whether it starts over."""
        if self._instance is None:
            self._instance = queries.instance_id(s)
        root, home = snap.storage.get(a.workers[0][0] if a.workers else a.host, (None, None))
        return checkpoints.placed(root, home or "", self._instance, row.id, row.attempt + 1,
                                  a.host, (row.checkpoint_dir, row.checkpoint_host,
                                           row.checkpoint_seen_at is not None))

    def keep_lease(self) -> None:
        """Take or renew the leader lease (a ticker calls this every third of its length)."""
        if self.barred:
            return
        asked = time.monotonic()
        if not self.leading:
            self.passes = (0, 0.0, None)  # a new tenure counts from 0
        with self.db.write() as s:
            leading = leader.acquire(s, ROLE, self.holder, self.settings.leader_lease_s,
                                     self.passes)
        if leading:
            self._renewed_at = asked
        was, self.leading = self.leading, leading
        if leading != was:
            log.info("%s scheduler leadership", "took" if leading else "lost")
        if leading and not was:
            self.on_lead()  # schedule at once: the last leader may have left work

    def has_lease(self) -> bool:
        """Leading, and sure the lease has not run out since it was last renewed."""
        return self.leading and \
            time.monotonic() - self._renewed_at < self.settings.leader_lease_s

    def bar(self, why: str) -> None:
        """Never lead again (this agent's code is older than the database): give the
        lease back now so a newer agent leads within a tick."""
        self.barred = why
        self.resign()

    def resign(self) -> bool:
        """Let go of the lease; True when this agent led (others should be told)."""
        if not self.leading:
            return False
        self.leading = False
        with self.db.write() as s:
            leader.release(s, ROLE, self.holder)
        log.info("released scheduler leadership")
        return True


def _finish_each(own: OwnStarts, here: list[object]) -> None:
    """Spawn every start the pass committed, whatever one of them raises (each is
    written `running` and held until its finish_start), then raise the first error."""
    failed: Exception | None = None
    for token in here:
        try:
            own.finish_start(token)
        except Exception as e:  # noqa: BLE001 - the others still start; raised below
            log.exception("starting an attempt the pass gave this host failed")
            failed = failed or e
    if failed is not None:
        raise failed


def waiting_reasons(db: Database, settings: Settings) -> Mapping[int, str]:
    """Why each queued job waits, computed as the leader would (for `tpuq status`)."""
    with db.read() as s:
        _, plan = plan_for(s, settings)
    return plan.waiting


def expected_starts(db: Database, settings: Settings) -> Mapping[int, forecast.Start]:
    """When each queued job should start, from the leader's own plan run forward in time
    (`tpuq status --start`, the dashboard's queue)."""
    with db.read() as s:
        snap = snapshot.read(s, settings.host_stale_s, settings.fair_share_half_life_h)
        share = holdings.shares(s)
        held = [forecast.Holding(job_id, team, user, host, frozenset(chips), kind, end)
                for job_id, team, user, host, kind, chips, end in holdings.held(s, share)]
    jobs, hosts, teams = views(snap)
    return forecast.expected_starts(jobs, hosts, teams, held, snap.now,
                                    array_running=snap.array_running, share_of_limit=share)
