"""The wake-up a machine with no agent rings after a submit: Celery's `send_task` (as
`doorbell.wake_agents()`) beside `queue/bell.py` (redis-py alone), each a fresh process
as a CLI command is, alternated, against a private redis-server.

    .venv/bin/python bench/ring.py            # 20 of each
    .venv/bin/python bench/ring.py --runs 5

Prints the median and p95 wall time of each process (interpreter start, imports, one
PUBLISH), `python -c pass` beside them, and the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.services import RedisServer  # noqa: E402


def wall_ms(code: str, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return (time.perf_counter() - t0) * 1000.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tpuq-bench-ring-") as d:
        redis = RedisServer(Path(d))
        redis.start()
        try:
            env = {k: v for k, v in os.environ.items() if not k.startswith("TPUQ_")}
            env.update(TPUQ_BROKER_URL=redis.url, TPUQ_HOME=d)
            kinds = {
                "python -c pass": "pass",
                "Celery (doorbell.wake_agents)":
                    "from tpuq.queue import doorbell; assert doorbell.wake_agents()",
                "redis-py (bell.wake_agents)":
                    f"from tpuq.queue import bell; assert bell.wake_agents({redis.url!r})",
            }
            samples: dict[str, list[float]] = {k: [] for k in kinds}
            for _ in range(args.runs):
                for name, code in kinds.items():
                    samples[name].append(wall_ms(code, env))
        finally:
            redis.stop()
    base = statistics.median(samples["Celery (doorbell.wake_agents)"])
    print(f"wake-up from a fresh process, {args.runs} runs each, alternated")
    for name, xs in samples.items():
        xs.sort()
        p95 = xs[min(len(xs) - 1, int(0.95 * len(xs)))]
        print(f"  {name:32s} p50 {statistics.median(xs):6.1f} ms  p95 {p95:6.1f} ms  "
              f"{statistics.median(xs) / base:4.2f}x Celery")


if __name__ == "__main__":
    main()
