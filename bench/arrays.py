"""Array submission rate: how fast one `tpuq submit --array` queues its tasks, beside
raw Celery `apply_async` measured in the same run.

    .venv/bin/python bench/arrays.py              # 10,000 tasks, 3 rounds each
    .venv/bin/python bench/arrays.py --tasks 2000 --rounds 1

tpuq (embedded): `tpuq submit --array 0-(N-1) -- /bin/true` as a subprocess in a fresh
TPUQ_HOME with no agent (the CLI writes SQLite itself; `tpuq db upgrade` made the
database before), launch to exit; the figure is N / wall. tpuq (team): the same
against a fresh PostgreSQL database, no agent (the CLI writes PostgreSQL itself).
Celery: N `apply_async` calls of a no-op task to a private redis-server (no worker:
only the queueing is timed), the same N.
Prints tasks/s for each and the ratio to Celery.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__":  # run as a script: import `tests.*` from the repository root
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench.stats import print_rates  # noqa: E402
from tests.services import RedisServer, create_pg_database, drop_pg_database  # noqa: E402

# the installed `tpuq` of the interpreter's venv: the commit measured may name its entry
# module otherwise (bench/run.py --against runs this file for both trees)
CLI = [str(Path(sys.executable).parent / "tpuq")]


def _env(home: str, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPUQ_")}
    return {**env, "TPUQ_HOME": home, **more}


def tpuq_rate(n: int, **env: str) -> float:
    with tempfile.TemporaryDirectory(prefix="tpuq-bench-arrays-") as home:
        e = _env(home, **env)
        # the database exists before the clock starts, as it does for anyone who submits
        # (the embedded one is made by the first command: not what is measured here)
        subprocess.run([*CLI, "db", "upgrade"], env=e, check=True, capture_output=True)
        began = time.perf_counter()
        r = subprocess.run([*CLI, "submit", "-q", "--array", f"0-{n - 1}", "--", "/bin/true"],
                           env=e, capture_output=True, text=True)
        wall = time.perf_counter() - began
        if r.returncode != 0:
            raise SystemExit(f"tpuq submit failed: {r.stderr}")
    return n / wall


def celery_rate(n: int, redis_url: str) -> float:
    from celery import Celery

    app = Celery("bench_arrays", broker=redis_url, set_as_current=False)
    app.conf.update(task_ignore_result=True, task_serializer="json")

    @app.task(name="bench.noop")
    def noop() -> None:  # never run: no worker
        return None

    noop.apply_async(queue="bench.arrays")  # connect before timing
    began = time.perf_counter()
    for _ in range(n):
        noop.apply_async(queue="bench.arrays")
    return n / (time.perf_counter() - began)


def figures(tasks: int) -> dict[str, float]:
    """bench/run.py's array rows: one round of each, tasks/s."""
    with tempfile.TemporaryDirectory() as d:
        redis = RedisServer(Path(d)).start()
        try:
            rows: dict[str, list[float]] = {"tpuq embedded": [], "tpuq team": [], "celery": []}
            _rounds(argparse.Namespace(rounds=1, tasks=tasks), rows, redis.url)
        finally:
            redis.stop()
    return {"array_tasks": float(tasks),
            "array_embedded_tasks_per_s": rows["tpuq embedded"][0],
            "array_team_tasks_per_s": rows["tpuq team"][0],
            "array_celery_tasks_per_s": rows["celery"][0]}


def _rounds(args: argparse.Namespace, rows: dict[str, list[float]], redis_url: str) -> None:
    for _ in range(args.rounds):  # interleaved: every figure sees the same machine
        rows["tpuq embedded"].append(tpuq_rate(args.tasks))
        url = create_pg_database()
        try:
            rows["tpuq team"].append(tpuq_rate(args.tasks, TPUQ_DATABASE_URL=url))
        finally:
            drop_pg_database(url)
        rows["celery"].append(celery_rate(args.tasks, redis_url))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows: dict[str, list[float]] = {"tpuq embedded": [], "tpuq team": [], "celery": []}
    with tempfile.TemporaryDirectory() as d:
        redis = RedisServer(Path(d)).start()
        try:
            _rounds(args, rows, redis.url)
        finally:
            redis.stop()
    print_rates(f"array submission, {args.tasks} tasks", rows, "celery", "tasks/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
