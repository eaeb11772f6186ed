"""Benchmark of one scheduling pass: 100k queued jobs, 1,000 hosts, 50 teams.

Run: .venv/bin/python bench/bench_policy.py   (target: plan() <= 100 ms)

The scenario is deterministic (random.Random(0)). Jobs come in id order, as the database
returns them; submitted_at grows with id (ids are assigned at submit). `plan_shuffled`
times the same pass on jobs in random order, `waiting_all` the cost of reading every
waiting reason (lazy in plan()), and `sorted_baseline` a plain sorted() on the same
100k key tuples, measured in the same run, as a yardstick for this machine.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from tpuq.scheduler.policy import HostView, JobView, TeamView, plan

TARGET_MS = 100.0
N_JOBS, N_HOSTS, N_TEAMS = 100_000, 1_000, 50
HOST_TYPES = {"v4-8": 4, "v5litepod-4": 4, "v5litepod-8": 8, "v6e-8": 8, "v3-8": 4}
NOW = 1_750_000_000.0


def _hosts(rng: random.Random) -> list[HostView]:
    types = list(HOST_TYPES)
    hosts = []
    for i in range(N_HOSTS):
        t = rng.choice(types)
        chips = tuple(range(HOST_TYPES[t]))
        roll = rng.random()
        if roll < 0.85:  # most hosts are fully busy
            free: frozenset[int] = frozenset()
        elif roll < 0.95:
            free = frozenset(c for c in chips if rng.random() < 0.4)
        else:
            free = frozenset(chips)
        hosts.append(HostView(f"h{i:04d}", t, chips, free, schedulable=rng.random() > 0.02))
    return hosts


def _teams(rng: random.Random) -> dict[str, TeamView]:
    teams = {}
    for i in range(N_TEAMS):
        name = f"team{i:02d}"
        teams[name] = TeamView(
            name,
            share=rng.choice([1.0, 1.0, 2.0, 0.5]),
            usage=rng.uniform(0, 5000),
            running_chips=rng.randint(0, 60),
            max_chips=rng.choice([None, 64, 128]),
            max_chips_by_type={"v4": 40} if i % 5 == 0 else {},
            max_chips_per_user=rng.choice([None, 16]),
            budget_left=rng.choice([None, 1000.0, 0.0 if i % 17 == 0 else 500.0]),
            budget_resets_at=NOW + 86_400,
        )
    return teams


def _jobs(rng: random.Random) -> list[JobView]:
    types: list[str | None] = [None, None, *HOST_TYPES]
    sizes: list[int | None] = [1, 1, 1, 2, 4, 4, 8, None, None]
    jobs = []
    for i in range(N_JOBS):
        jobs.append(
            JobView(
                id=i + 1,
                team=f"team{rng.randrange(N_TEAMS):02d}",
                user=f"u{rng.randrange(5)}",
                priority=rng.choice([0, 0, 0, 0, 1, 2, 5]),
                submitted_at=NOW - 86_400 + i * 0.5 + rng.random(),
                chips=rng.choice(sizes),
                tpu_type=rng.choice(types),
                not_before=NOW + 60 if rng.random() < 0.03 else None,
                depends_on=(i - 5,) if i > 5 and rng.random() < 0.05 else (),
                est_hours=rng.choice([0.0, 1.0, 4.0]),
            )
        )
    return jobs


def _time(fn: Callable[[], Any], runs: int = 5) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def run() -> dict[str, float]:
    """Figures in milliseconds (best/median of 5), plus the scenario's counts."""
    rng = random.Random(0)
    hosts, teams, jobs = _hosts(rng), _teams(rng), _jobs(rng)
    succeeded = frozenset(range(1, N_JOBS, 2))
    shuffled = jobs[:]
    rng.shuffle(shuffled)
    keys = [(rng.random(), -j.priority, j.submitted_at, j.id) for j in jobs]
    result = plan(jobs, hosts, teams, NOW, succeeded)
    figures: dict[str, float] = {
        "assigned": float(len(result.assignments)),
        "waiting": float(len(result.waiting)),
        "free_chips": float(sum(len(h.free) for h in hosts if h.schedulable)),
    }
    timed: dict[str, Callable[[], Any]] = {
        "plan": lambda: plan(jobs, hosts, teams, NOW, succeeded),
        "plan_shuffled": lambda: plan(shuffled, hosts, teams, NOW, succeeded),
        "sorted_baseline": lambda: sorted(keys),
        "waiting_all": lambda: list(plan(jobs, hosts, teams, NOW, succeeded).waiting.values()),
    }
    for name, fn in timed.items():
        runs = _time(fn)
        figures[f"{name}_best_ms"] = min(runs)
        figures[f"{name}_median_ms"] = statistics.median(runs)
    return figures


def main() -> None:
    figures = run()
    print(f"scenario: {N_JOBS} jobs, {N_HOSTS} hosts, {N_TEAMS} teams")
    for name, value in figures.items():
        print(f"  {name:26s} {value:10.1f}")
    best = figures["plan_best_ms"]
    verdict = "OK" if figures["plan_median_ms"] <= TARGET_MS else "OVER"
    print(f"target: plan() <= {TARGET_MS:.0f} ms -> best {best:.1f} ms, {verdict} (median)")


if __name__ == "__main__":
    main()
