"""Running totals over attempts: wait and resume histograms, preemptions, lost work and
goodput (pure; rows in, numbers out).

A total only ever grows, as Prometheus counters and histograms must: every attempt is
counted once, when it starts (the histograms) or when it ends (everything else); an
attempt still running adds its chip-seconds so far to a copy made for one scrape.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tpuq.state.aggregates import INTERRUPTED, cause
from tpuq.state.states import NOT_CHARGED, Outcome

_FREE = {o.value for o in NOT_CHARGED}
# teams' charged chip-seconds are kept in quarter-hour buckets (every time zone's
# midnight falls on one: budget periods start on a bucket) for the longest period and a
# day more: a budget period's use is then a sum of buckets, not a scan of attempts
BUCKET_S = 900.0
KEEP_S = 32 * 86400.0

# seconds: from a scheduling pass's worth to a week in the queue
WAIT_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0,
                21600.0, 43200.0, 86400.0, 172800.0, 604800.0)


@dataclass
class Histogram:
    """Observations per bucket (the last one: above every bound), their count and sum."""

    bounds: tuple[float, ...] = WAIT_BUCKETS
    counts: list[int] = field(default_factory=lambda: [0] * (len(WAIT_BUCKETS) + 1))
    total: float = 0.0

    def observe(self, value: float) -> None:
        value = max(0.0, value)
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, count) pairs as Prometheus wants them, `+Inf` last."""
        out, running = [], 0
        for bound, n in zip((*map(_le, self.bounds), "+Inf"), self.counts):
            running += n
            out.append((bound, running))
        return out

    @property
    def count(self) -> int:
        return sum(self.counts)

    def plus(self, other: Histogram | None) -> Histogram:
        if other is None:
            return Histogram(self.bounds, list(self.counts), self.total)
        return Histogram(self.bounds, [a + b for a, b in zip(self.counts, other.counts)],
                         self.total + other.total)


def _le(bound: float) -> str:
    return f"{bound:g}" if bound < 1e6 else repr(bound)


@dataclass
class Tally:
    wait: dict[str, Histogram] = field(default_factory=dict)  # team -> time to start
    resume: Histogram = field(default_factory=Histogram)  # preempted -> running again
    preemptions: dict[str, int] = field(default_factory=dict)  # cause -> attempts
    lost_chip_s: dict[str, float] = field(default_factory=dict)  # cause -> chip-seconds
    allocated_chip_s: float = 0.0
    useful_chip_s: float = 0.0
    # team -> bucket start -> chip-seconds charged (usage.py's rule) in that bucket
    charged: dict[str, dict[float, float]] = field(default_factory=dict)
    horizon: float = 0.0  # buckets before this are dropped
    base: Tally | None = None  # the settled totals this one adds to (see `plus`)
    _sums: dict[str, tuple[list[float], list[float]]] | None = None  # see charged_hours

    def plus(self, fresh: Tally) -> Tally:
        """These totals and `fresh` together, without copying the buckets: the result
        reads this one's for charged chip-hours."""
        teams = set(self.wait) | set(fresh.wait)
        return Tally(
            wait={t: (self.wait.get(t) or Histogram()).plus(fresh.wait.get(t)) for t in teams},
            resume=self.resume.plus(fresh.resume),
            preemptions=_sum(self.preemptions, fresh.preemptions),
            lost_chip_s=_sum(self.lost_chip_s, fresh.lost_chip_s),
            allocated_chip_s=self.allocated_chip_s + fresh.allocated_chip_s,
            useful_chip_s=self.useful_chip_s + fresh.useful_chip_s,
            charged=fresh.charged, horizon=self.horizon, base=self)

    def add_starts(self, rows: Iterable[Any]) -> None:
        """Rows of aggregates.starts: (team, waited_s, after, started_at)."""
        for team, waited, after, _ in rows:
            if waited is None:
                continue
            if after in INTERRUPTED:
                self.resume.observe(float(waited))
            else:
                self.wait.setdefault(team, Histogram()).observe(float(waited))

    def add_ends(self, rows: Iterable[Any]) -> None:
        """Rows of aggregates.ends: attempts that ended."""
        for r in rows:
            n = len(r.chips or ())
            if r.started_at is not None and r.outcome not in _FREE:
                self._charge(r.team, n, r.started_at, r.ended_at)
            self.allocated_chip_s += n * max(0.0, r.ended_at - r.assigned_at)
            if r.outcome in INTERRUPTED:
                why = cause(r.outcome, r.reason)
                self.preemptions[why] = self.preemptions.get(why, 0) + 1
                if r.started_at is not None:  # what it did since its last checkpoint
                    since = max(r.checkpoint_at or r.started_at, r.started_at)
                    self.lost_chip_s[why] = self.lost_chip_s.get(why, 0.0) + \
                        n * max(0.0, r.ended_at - since)
            if r.started_at is None:
                continue
            saved = r.ended_at if r.outcome == Outcome.SUCCEEDED else r.checkpoint_at
            if saved is not None:
                self.useful_chip_s += n * max(0.0, min(saved, r.ended_at) - r.started_at)

    def add_running(self, rows: Iterable[Any], now: float) -> None:
        """Rows of aggregates.running: chip-seconds so far, useful up to a checkpoint."""
        for r in rows:
            n = len(r.chips or ())
            self.allocated_chip_s += n * max(0.0, now - r.assigned_at)
            if r.started_at is not None:
                self._charge(r.team, n, r.started_at, now)
            if r.started_at is not None and r.checkpoint_at is not None:
                self.useful_chip_s += n * max(0.0, r.checkpoint_at - r.started_at)

    def _charge(self, team: str, chips: int, start: float, end: float) -> None:
        start = max(start, self.horizon)
        if chips <= 0 or end <= start:
            return
        self._sums = None
        buckets = self.charged.setdefault(team, {})
        b = start - start % BUCKET_S
        while b < end:
            part = min(end, b + BUCKET_S) - max(start, b)
            buckets[b] = buckets.get(b, 0.0) + chips * part
            b += BUCKET_S

    def forget_before(self, t: float) -> None:
        """Drop buckets older than `t` (and charge nothing before it from now on)."""
        self.horizon = max(self.horizon, t - t % BUCKET_S)
        self._sums = None
        for buckets in self.charged.values():
            for b in [b for b in buckets if b < self.horizon]:
                del buckets[b]

    def charged_hours(self, lo: float) -> dict[str, float]:
        """team -> chip-hours charged since `lo` (a bucket cut by `lo` counts in part)."""
        if self._sums is None:  # running sums over the sorted buckets, once per change
            self._sums = {}
            for team, buckets in self.charged.items():
                starts = sorted(buckets)
                running, sums = 0.0, []
                for b in starts:
                    running += buckets[b]
                    sums.append(running)
                self._sums[team] = (starts, sums)
        out = {}
        for team, (starts, sums) in self._sums.items():
            if not starts:
                continue
            i = bisect.bisect_right(starts, lo) - 1  # the bucket holding lo, or none
            before = sums[i - 1] if i >= 1 else 0.0
            cut = 0.0
            if i >= 0 and starts[i] + BUCKET_S > lo:  # its part before lo
                cut = self.charged[team][starts[i]] * (lo - starts[i]) / BUCKET_S
            elif i >= 0:
                before = sums[i]
            out[team] = (sums[-1] - before - cut) / 3600.0
        return _sum(self.base.charged_hours(lo), out) if self.base is not None else out

    @property
    def goodput(self) -> float | None:
        if self.allocated_chip_s <= 0:
            return None
        return min(1.0, self.useful_chip_s / self.allocated_chip_s)


N = TypeVar("N", int, float)


def _sum(a: dict[str, N], b: dict[str, N]) -> dict[str, N]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in set(a) | set(b)}
