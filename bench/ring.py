"""The wake-up a machine with no agent rings after it changed the queue: a NOTIFY on the
database connection its request already opened (state/wakeups.py), beside what it did
before, a PUBLISH on a new connection to the broker (redis-py, as the removed
`queue/bell.py` did), alternated, in one process, against a private redis-server and a
fresh PostgreSQL database; and the import the old way cost a fresh CLI process.

    .venv/bin/python bench/ring.py            # 50 of each
    .venv/bin/python bench/ring.py --runs 10

Prints the median and p95 of each, and the ratio to the PUBLISH.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.services import RedisServer, create_pg_database, drop_pg_database  # noqa: E402


def ms(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000.0


def publish(url: str) -> None:
    """What a laptop's submit rang before: a new broker connection, one PUBLISH."""
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)
    try:
        client.publish("/0.tpuq.control/tpuq.control", json.dumps({"body": "wake"}))
    finally:
        client.close()


def fresh_ms(code: str) -> float:
    return ms(lambda: subprocess.run([sys.executable, "-c", code], check=True))


def show(name: str, xs: list[float], base: float) -> None:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, int(0.95 * len(xs)))]
    print(f"  {name:46s} p50 {statistics.median(xs):7.2f} ms  p95 {p95:7.2f} ms  "
          f"{statistics.median(xs) / base:5.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()
    from tpuq.state import wakeups
    from tpuq.state.db import Database

    os.environ.pop("TPUQ_BROKER_URL", None)
    with tempfile.TemporaryDirectory(prefix="tpuq-bench-ring-") as d:
        redis = RedisServer(Path(d)).start()
        pg = create_pg_database()
        db = Database(pg)
        try:
            db.upgrade()
            wakeups.ring(db)  # the connection open, as after the request it follows
            samples: dict[str, list[float]] = {"PUBLISH, new broker connection (before)": [],
                                               "NOTIFY, open database connection (now)": []}
            imports: dict[str, list[float]] = {"python -c pass": [], "python -c 'import redis'": []}
            for _ in range(args.runs):
                samples["PUBLISH, new broker connection (before)"].append(
                    ms(lambda: publish(redis.url)))
                samples["NOTIFY, open database connection (now)"].append(
                    ms(lambda: wakeups.ring(db)))
            for _ in range(max(5, args.runs // 5)):
                imports["python -c pass"].append(fresh_ms("pass"))
                imports["python -c 'import redis'"].append(fresh_ms("import redis"))
        finally:
            db.dispose()
            drop_pg_database(pg)
            redis.stop()
    base = statistics.median(samples["PUBLISH, new broker connection (before)"])
    print(f"the wake-up after a request from a machine without an agent, {args.runs} each, "
          "alternated")
    for name, xs in samples.items():
        show(name, xs, base)
    print("what the old way added to a fresh CLI process (import redis; the new way imports "
          "nothing the request did not)")
    base = statistics.median(imports["python -c pass"])
    for name, xs in imports.items():
        show(name, xs, base)


if __name__ == "__main__":
    main()
