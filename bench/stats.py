"""Small timing helpers shared by the benchmark modules (all figures in milliseconds)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100] (numpy's default method)."""
    if not values:
        raise ValueError("percentile of no values")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summary(prefix: str, samples_ms: Sequence[float]) -> dict[str, float]:
    """{prefix_p50_ms, prefix_p95_ms, prefix_min_ms, prefix_max_ms, prefix_n}."""
    return {
        f"{prefix}_p50_ms": statistics.median(samples_ms),
        f"{prefix}_p95_ms": percentile(samples_ms, 95),
        f"{prefix}_min_ms": min(samples_ms),
        f"{prefix}_max_ms": max(samples_ms),
        f"{prefix}_n": float(len(samples_ms)),
    }


def time_ms(fn: Callable[[], Any], runs: int, warmup: int = 2) -> list[float]:
    """Wall time of `fn()` in ms, `runs` times after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def print_rates(title: str, rows: dict[str, list[float]], base: str, unit: str) -> None:
    """Each row's median rate beside the `base` row's, as a ratio (one run's figures)."""
    baseline = statistics.median(rows[base])
    rounds = len(rows[base])
    print(f"{title}, median of {rounds}, {time.strftime('%Y-%m-%d')}")
    width = max(map(len, rows))
    for name, rates in rows.items():
        med = statistics.median(rates)
        print(f"  {name:<{width}} {med:>9,.0f} {unit}  {med / baseline:5.2f}x {base}")
