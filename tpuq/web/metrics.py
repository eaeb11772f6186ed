"""`/metrics`: one Prometheus collector that reads the database at scrape time.

No per-job labels (series stay bounded by teams, states, hosts' types and causes) and
nothing that only this process knows: any process that reads the database serves the
same numbers. One cache, for speed only: totals over attempts that started or ended
more than SETTLE_S ago, which no write can change any more (a transaction is never
open that long: db.py ends idle ones after 10 s), so a scrape reads only what is newer
and a restart rebuilds the same totals on its first scrape.

The names, types and labels are pinned by tests/unit/test_metrics_golden.py; docs/
dashboard.md lists them for people, and workers/grafana-dashboard.json charts them.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session

from tpuq.state import aggregates, usage
from tpuq.state.db import Database
from tpuq.web.tally import KEEP_S, Tally

log = logging.getLogger("tpuq.web.metrics")
SETTLE_S = 120.0
FAR_FUTURE = 1e18  # an upper bound for "everything since": a float both databases compare


class TpuqCollector(Collector):
    """`fleet_waiting`: slots the fleet controller declared that have no host yet (the
    fleet's hook; none without a fleet controller)."""

    def __init__(self, db: Database, stale_s: float,
                 fleet_waiting: Callable[[Session], int] = aggregates.fleet_slots_waiting
                 ) -> None:
        self.db = db
        self.stale_s = stale_s
        self.fleet_waiting = fleet_waiting
        self._settled = Tally()
        self._cut = 0.0  # the settled totals cover attempts before this (database clock)
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        started = time.monotonic()
        try:
            with self._lock, self.db.read() as s:
                families = list(self._read(s))
        except Exception as e:  # noqa: BLE001 - a scrape says the database is unreadable
            log.warning("metrics: cannot read the database: %s", e)
            families, up = [], 0.0
        else:
            up = 1.0
        yield from families
        yield _gauge("tpuq_up", "1 when the last scrape read the database, else 0", up)
        yield _gauge("tpuq_scrape_seconds", "Time this scrape took to read the database",
                     time.monotonic() - started)

    def _read(self, s: Session) -> Iterator[Metric]:
        now = aggregates.now(s)
        yield from _jobs(aggregates.open_jobs(s))
        hosts = aggregates.host_counts(s, now, self.stale_s)
        yield from _hosts(hosts, self.fleet_waiting(s))
        tally = self._tally(s, now)
        yield from _quota(aggregates.teams(s), tally, now)
        yield from _totals(tally)
        yield from _scheduler(aggregates.scheduler_passes(s))
        yield _counter("tpuq_notifications_failed", "Notifications given up after every try",
                       aggregates.notifications_failed(s))

    def _tally(self, s: Session, now: float) -> Tally:
        """The settled totals, brought up to `now - SETTLE_S`, plus what is newer (one
        query each for starts and ends since the last cut, split here)."""
        cut = max(self._cut, now - SETTLE_S)
        started = aggregates.starts(s, self._cut, FAR_FUTURE)
        ended = aggregates.ends(s, self._cut, FAR_FUTURE)
        if cut > self._cut:
            self._settled.forget_before(now - KEEP_S)
            self._settled.add_starts(r for r in started if r.started_at < cut)
            self._settled.add_ends(r for r in ended if r.ended_at < cut)
            self._cut = cut
        fresh = Tally(horizon=self._settled.horizon)
        fresh.add_starts(r for r in started if r.started_at >= cut)
        fresh.add_ends(r for r in ended if r.ended_at >= cut)
        fresh.add_running(aggregates.running(s), now)
        return self._settled.plus(fresh)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _jobs(counts: dict[tuple[str, str], int]) -> Iterator[Metric]:
    g = GaugeMetricFamily("tpuq_jobs", "Open jobs (queued, held, assigned, running, "
                          "preempting) by team and state", labels=["team", "state"])
    for (team, state), n in sorted(counts.items()):
        g.add_metric([team, state], n)
    yield g


def _hosts(hosts: list[aggregates.HostCount], fleet_waiting: int) -> Iterator[Metric]:
    by_state = dict.fromkeys(aggregates.HOST_STATES, 0)
    chips: dict[tuple[str, str], int] = {}
    for h in hosts:
        by_state[h.state] += 1
        kind = h.tpu_type or "unknown"
        free = "free" if h.state == "ok" else "out_of_service"
        for state, n in (("used", h.used), (free, h.chips - h.used)):
            chips[(kind, state)] = chips.get((kind, state), 0) + max(0, n)
    by_state["fleet_waiting"] += fleet_waiting
    g = GaugeMetricFamily("tpuq_hosts", "Hosts by state: ok, draining, busy (a foreign "
                          "holder), notice, silent, stopped, lost (its VM went), outdated "
                          "(its agent older than the schema), unavailable (no chip shape, "
                          "low disk), fleet_waiting (a declared VM not up yet)",
                          labels=["state"])
    for state, n in by_state.items():
        g.add_metric([state], n)
    yield g
    c = GaugeMetricFamily("tpuq_chips", "Chips by accelerator type and state: used, free "
                          "(on a host that takes work), out_of_service", labels=["tpu_type", "state"])
    for (kind, state), n in sorted(chips.items()):
        c.add_metric([kind, state], n)
    yield c


def _quota(rows: list[Any], tally: Tally, now: float) -> Iterator[Metric]:
    day = tally.charged_hours(now - usage.BURN_WINDOW_S)
    periods = {r.budget_period for r in rows if r.budget_chip_hours is not None}
    used = {p: tally.charged_hours(usage.period_start(now, p)) for p in periods}
    limit = GaugeMetricFamily("tpuq_team_budget_chip_hours", "A team's chip-hour budget per "
                              "period", labels=["team", "period"])
    spent = GaugeMetricFamily("tpuq_team_used_chip_hours", "Chip-hours charged to a team in "
                              "its current budget period", labels=["team", "period"])
    for r in rows:
        if r.budget_chip_hours is not None:
            limit.add_metric([r.name, r.budget_period], r.budget_chip_hours)
            spent.add_metric([r.name, r.budget_period], used[r.budget_period].get(r.name, 0.0))
    burn = GaugeMetricFamily("tpuq_team_burn_chip_hours_per_day", "Chip-hours charged to a "
                             "team over the last 24 hours", labels=["team"])
    for team in sorted({*day, *(r.name for r in rows)}):
        burn.add_metric([team], day.get(team, 0.0))
    yield from (limit, spent, burn)


def _totals(t: Tally) -> Iterator[Metric]:
    wait = HistogramMetricFamily("tpuq_job_wait_seconds", "Time from submission (or a "
                                 "failed attempt's end) to running", labels=["team"])
    for team, h in sorted(t.wait.items()):
        wait.add_metric([team], h.cumulative(), sum_value=h.total)
    yield wait
    resume = HistogramMetricFamily("tpuq_resume_seconds", "Time from a preempted (or "
                                   "lost) attempt's end to the job running again")
    resume.add_metric([], t.resume.cumulative(), sum_value=t.resume.total)
    yield resume
    pre = CounterMetricFamily("tpuq_preemptions", "Attempts ended by a preemption, "
                              "maintenance, a reboot or a lost host, by cause", labels=["cause"])
    lost = CounterMetricFamily("tpuq_lost_work_chip_seconds", "Chip-seconds of preempted "
                               "attempts since their last checkpoint", labels=["cause"])
    for why in aggregates.CAUSES:
        pre.add_metric([why], t.preemptions.get(why, 0))
        lost.add_metric([why], t.lost_chip_s.get(why, 0.0))
    yield from (pre, lost)
    yield _counter("tpuq_allocated_chip_seconds", "Chip-seconds held by attempts, from "
                   "assignment to end", t.allocated_chip_s)
    yield _counter("tpuq_useful_chip_seconds", "Chip-seconds kept: a succeeded attempt's "
                   "run, any other's up to its last checkpoint", t.useful_chip_s)
    good = t.goodput
    yield _gauge("tpuq_goodput_ratio", "Useful chip-seconds over allocated, all time",
                 math.nan if good is None else good)


def _scheduler(row: Any) -> Iterator[Metric]:
    count = int(row.pass_count or 0) if row is not None else 0
    total = float(row.pass_seconds_sum or 0.0) if row is not None else 0.0
    last = row.pass_seconds_last if row is not None else None
    yield SummaryMetricFamily("tpuq_scheduler_pass_seconds", "The leader's scheduling "
                              "passes while it leads (a new leader starts from 0)",
                              count_value=count, sum_value=total)
    yield _gauge("tpuq_scheduler_last_pass_seconds", "The leader's last scheduling pass",
                 math.nan if last is None else float(last))
