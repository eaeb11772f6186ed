"""Running totals over attempts: wait and resume histograms, preemptions, lost work and
goodput (pure; rows in, numbers out).

A total only ever grows, as Prometheus counters and histograms must: every attempt is
counted once, when it starts (the histograms) or when it ends (everything else); an
attempt still running adds its chip-seconds so far to a copy made for one scrape.
"""

from __future__ import annotations

import bisect
import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tpuq.state.aggregates import INTERRUPTED, cause

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

    def copy(self) -> Tally:
        return copy.deepcopy(self)

    def add_starts(self, rows: Iterable[Any]) -> None:
        """Rows of aggregates.starts: (team, waited_s, after)."""
        for team, waited, after in rows:
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
            saved = r.ended_at if r.outcome == "succeeded" else r.checkpoint_at
            if saved is not None:
                self.useful_chip_s += n * max(0.0, min(saved, r.ended_at) - r.started_at)

    def add_running(self, rows: Iterable[Any], now: float) -> None:
        """Rows of aggregates.running: chip-seconds so far, useful up to a checkpoint."""
        for r in rows:
            n = len(r.chips or ())
            self.allocated_chip_s += n * max(0.0, now - r.assigned_at)
            if r.started_at is not None and r.checkpoint_at is not None:
                self.useful_chip_s += n * max(0.0, r.checkpoint_at - r.started_at)

    @property
    def goodput(self) -> float | None:
        if self.allocated_chip_s <= 0:
            return None
        return min(1.0, self.useful_chip_s / self.allocated_chip_s)
