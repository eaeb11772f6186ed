"""How good are the expected starts of `tpuq status --start`? A generated trace replayed
through the scheduler's own policy.

    .venv/bin/python bench/forecast.py            # 300 jobs, about a minute
    .venv/bin/python bench/forecast.py --jobs 120 # quicker

The trace: 8 hosts of 4 chips; jobs arrive about every 9 minutes (the hosts stay busy
and a queue builds), each asking 1, 2 or 4 chips with a time limit of 1, 2, 4 or 8 hours
and running 30-100 % of it; 60 % of them report progress with a total (`tpuq.job.
checkpointed(step, total=N)`), so the agent knows an ETA (within 5 %) once a tenth of
the run is done. "Reality" is the pure policy (`policy.plan`) applied at every arrival
and end, as the leader does. When a job arrives and has to wait, its expected start is
taken from `forecast.expected_starts` with what is known then; the error is measured
against when it really started.

Figures: the median absolute error of the estimates, in minutes and as a share of the
job's real wait (target <= 20 %); baseline, same trace: estimates from time limits
alone (as `squeue --start`), without the ETAs and without the owners' usual share of
their limits (holdings.shares: the median over their jobs that succeeded lately).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parent.parent)

from tpuq.scheduler.forecast import Holding, expected_starts
from tpuq.scheduler.policy import plan
from tpuq.scheduler.views import HostView, JobView
from tpuq.state.holdings import expected_end

HOSTS, CHIPS = 8, 4
H = 3600.0


@dataclass
class Trace:
    job: JobView
    runtime: float
    reports: bool  # reports progress: an ETA is known after a tenth of the run
    eta_noise: float
    started: float | None = None
    host: str = ""
    chips: tuple[int, ...] = ()

    def eta(self, now: float) -> float | None:
        assert self.started is not None
        if not self.reports or now < self.started + 0.1 * self.runtime:
            return None
        return self.started + self.runtime * self.eta_noise


def trace(n: int, seed: int) -> list[Trace]:
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(1, n + 1):
        t += rng.expovariate(1 / 540.0)
        limit = rng.choice((1, 2, 4, 8)) * H
        job = JobView(id=i, team="lab", user=f"u{i % 7}", priority=0,
                      submitted_at=t, chips=rng.choice((1, 2, 2, None)), tpu_type="v4-8",
                      time_limit_s=limit)
        out.append(Trace(job, limit * rng.uniform(0.3, 1.0), rng.random() < 0.6,
                         rng.uniform(0.95, 1.05)))
    return out


def hosts(running: list[Trace], now: float) -> list[HostView]:
    """The hosts as the leader sees them: busy chips free at their job's time limit."""
    out = []
    for h in range(HOSTS):
        name = f"h{h}"
        mine = [r for r in running if r.host == name]
        busy = {c for r in mine for c in r.chips}
        free_at = {c: r.started + r.job.time_limit_s for r in mine for c in r.chips}  # type: ignore[operator]
        out.append(HostView(name=name, tpu_type="v4-8", chips=tuple(range(CHIPS)),
                            free=frozenset(range(CHIPS)) - busy, free_at=free_at))
    return out


def shares(jobs: list[Trace], now: float) -> dict[str, float]:
    """user -> median share of the time limit their ended jobs used (holdings.shares)."""
    done: dict[str, list[float]] = {}
    for j in jobs:
        if j.started is not None and j.started + j.runtime <= now:
            done.setdefault(j.job.user, []).append(j.runtime / j.job.time_limit_s)  # type: ignore[operator]
    return {user: statistics.median(v) for user, v in done.items()}


def replay(jobs: list[Trace], use_eta: bool) -> list[tuple[float, float, float]]:
    """(submitted, predicted start, real start) of every job that had to wait."""
    pending = sorted(jobs, key=lambda j: j.job.submitted_at)
    queue: list[Trace] = []
    running: list[Trace] = []
    predicted: dict[int, float | None] = {}
    while pending or queue or running:
        ends = [r.started + r.runtime for r in running]  # type: ignore[operator]
        t = min([*ends, *(p.job.submitted_at for p in pending[:1])])
        running = [r for r in running if r.started + r.runtime > t]  # type: ignore[operator]
        arrived = [p for p in pending if p.job.submitted_at <= t]
        pending = pending[len(arrived):]
        queue += arrived
        p = plan([q.job for q in queue], hosts(running, t), {}, t)
        by_id = {q.job.id: q for q in queue}
        for a in p.assignments:
            q = by_id[a.job_id]
            q.started, q.host, q.chips = t, a.host, a.chips
            running.append(q)
        queue = [q for q in queue if q.started is None]
        waiting = [q for q in arrived if q.started is None]
        if waiting:  # what loop.expected_starts reads, as of t
            share = shares(jobs, t) if use_eta else {}
            held = [Holding(r.job.id, r.job.team, r.job.user, r.host, frozenset(r.chips),
                            "v4-8", expected_end(
                                r.started + r.job.time_limit_s * share.get(r.job.user, 1.0),  # type: ignore[operator]
                                r.eta(t) if use_eta else None))
                    for r in running]
            starts = expected_starts([q.job for q in queue], hosts(running, t), {}, held, t,
                                     share_of_limit=share)
            for q in waiting:
                predicted[q.job.id] = starts[q.job.id].at
    return [(j.job.submitted_at, predicted[j.job.id] or float("inf"), j.started or 0.0)
            for j in jobs if j.job.id in predicted]


def report(label: str, rows: list[tuple[float, float, float]]) -> float:
    errors = [abs(pred - real) for _, pred, real in rows]
    waits = [real - sub for sub, _, real in rows]
    share = [e / w for e, w in zip(errors, waits) if w > 0]
    median = statistics.median(share)
    print(f"{label}: {len(rows)} jobs waited (median wait {statistics.median(waits) / 60:.0f} "
          f"min); median error {statistics.median(errors) / 60:.1f} min = {median:.0%} of "
          "the real wait")
    return median


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    jobs = trace(args.jobs, args.seed)
    with_eta = report("expected starts (time limits and ETAs)", replay(jobs, use_eta=True))
    for j in jobs:
        j.started = None
    limits = report("baseline: time limits alone", replay(jobs, use_eta=False))
    print(f"target: median error <= 20 % of the wait: {with_eta:.0%} "
          f"({'met' if with_eta <= 0.2 else 'MISSED'}); baseline {limits:.0%}")


if __name__ == "__main__":
    main()
