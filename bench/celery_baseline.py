"""A minimal Celery app: the raw Celery yardstick for the team deployment's figures.

Run by the bench as its own worker process, on the team stack's private Redis:

    BENCH_BROKER_URL=redis://127.0.0.1:PORT/0 \\
        celery -A bench.celery_baseline worker -P threads -c 1 -Q bench.baseline

Configured like tpuq's app where it matters for latency (threads pool, early acks, no
results, prefetch 1). Tasks report back by RPUSHing `time.time()` to a Redis list the
sender names, so the sender measures without a results backend:

- `bench.stamp(key)`: the task's start time (send -> task start);
- `bench.gate(gate, key)`: blocks on BLPOP `gate`, then stamps (holds the worker, like
  the blocker job in the turnover figure);
- `bench.true(key)`: `subprocess.run(['/bin/true'])`, then stamps (the least a job
  queue that forks each job can do per job).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from typing import Any

from celery import Celery

QUEUE = "bench.baseline"
_local = threading.local()


def make_app(broker_url: str) -> Celery:
    app = Celery("bench_baseline", broker=broker_url, set_as_current=False)
    app.conf.update(
        task_acks_late=False,
        task_ignore_result=True,
        result_backend=None,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        accept_content=["json"],
        task_default_queue=QUEUE,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    return app


app = make_app(os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/0"))


def _redis() -> Any:
    client = getattr(_local, "redis", None)
    if client is None:
        import redis

        client = _local.redis = redis.Redis.from_url(app.conf.broker_url)
    return client


def _stamp(key: str) -> None:
    _redis().rpush(key, repr(time.time()))


@app.task(name="bench.stamp")
def stamp(key: str) -> None:
    _stamp(key)


@app.task(name="bench.gate")
def gate(gate_key: str, key: str) -> None:
    _redis().blpop([gate_key], timeout=120)
    _stamp(key)


@app.task(name="bench.true")
def run_true(key: str) -> None:
    subprocess.run(["/bin/true"], check=True)
    _stamp(key)
