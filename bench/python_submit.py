"""Queuing from one Python process: `tpuq.client` one call per job and `submit_many`,
functions and commands, beside raw Celery `apply_async`, in one run.

    .venv/bin/python bench/python_submit.py               # 2,000 jobs each, 1 round
    .venv/bin/python bench/python_submit.py --jobs 500 --rounds 3

tpuq: a fresh embedded stack and a fresh team stack (PostgreSQL, Redis), each with its
agent running; this process queues N jobs through the agent's socket, as a sweep driver
on a TPU VM does: `submit(fn, i)` N times, `submit_command(["/bin/true"])` N times, and
one `submit_many` of N `call(fn, i)` and of N `command(["/bin/true"])`. Every job is
queued held, so that only the queuing is timed (the agent does not start running them
meanwhile). Celery: N `apply_async` calls of a no-op task to a private redis-server, no
worker (only the queuing is timed), the same N. Prints jobs/s for each and the ratio to
Celery.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.arrays import celery_rate  # noqa: E402
from bench.embedded import EmbeddedStack  # noqa: E402
from bench.stats import print_rates  # noqa: E402
from bench.team import TeamStack  # noqa: E402
from tests.services import RedisServer  # noqa: E402


def work(i: int) -> int:  # what the function jobs would run (they are queued held)
    return i * i


def _ways(cfg: Any) -> dict[str, Callable[[int], int]]:
    """Each way of queuing n jobs from Python; each returns how many it queued."""
    from tpuq import client

    def one_fn(n: int) -> int:
        return len([client.submit(work, i, hold=True, settings=cfg) for i in range(n)])

    def one_cmd(n: int) -> int:
        return len([client.submit_command(["/bin/true"], hold=True, settings=cfg)
                    for _ in range(n)])

    def many_fn(n: int) -> int:
        return len(client.submit_many([client.call(work, i) for i in range(n)], hold=True,
                                      settings=cfg))

    def many_cmd(n: int) -> int:
        return len(client.submit_many([client.command(["/bin/true"]) for _ in range(n)],
                                      hold=True, settings=cfg))

    return {"one call, function": one_fn, "one call, command": one_cmd,
            "submit_many, functions": many_fn, "submit_many, commands": many_cmd}


def tpuq_rates(stack_type: type[EmbeddedStack], n: int) -> dict[str, float]:
    from tpuq.settings import load

    out = {}
    with stack_type() as stack:
        cfg = load(stack.env)
        for name, way in _ways(cfg).items():
            way(1)  # connect (and load cloudpickle) before timing
            began = time.perf_counter()
            queued = way(n)
            out[name] = queued / (time.perf_counter() - began)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    rows: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as d:
        redis = RedisServer(Path(d)).start()
        try:
            for _ in range(args.rounds):  # interleaved: every figure sees the same machine
                rows.setdefault("celery apply_async", []).append(celery_rate(args.jobs, redis.url))
                for label, kind in (("embedded", EmbeddedStack), ("team", TeamStack)):
                    for name, rate in tpuq_rates(kind, args.jobs).items():
                        rows.setdefault(f"tpuq {label}, {name}", []).append(rate)
        finally:
            redis.stop()
    print_rates(f"queuing from Python, {args.jobs} jobs", rows, "celery apply_async",
                "jobs/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
