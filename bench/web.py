"""`/metrics` and the dashboard against a big deployment: 10,000 open and 100,000 ended
jobs in PostgreSQL (64 hosts of 8 chips; 400 jobs running, the rest queued; ended jobs
spread over 90 days, a tenth of them preempted once by maintenance and resumed).

    .venv/bin/python bench/web.py            # about 2 minutes (most of it filling)
    .venv/bin/python bench/web.py --quick    # a tenth of the rows

Figures, each beside a baseline from the same run:
- scrape: /metrics' collector, p50 and p95 of SCRAPES scrapes after the first (which
  builds the settled totals once); baseline: the ListJobs handler (what `tpuq status`
  reads) on the same database.
- scheduler pass while scraping: the leader's read and plan (scheduler/passes.plan_for in a
  write transaction, rolled back), alternately with another process scraping once a
  second (fifteen times Prometheus' default rate) and with that process stopped.
- first load: each page's first GET after the server starts, on a second database of
  10,000 ended jobs (all in the history page's default week) and 200 open ones;
  baseline: the History handler alone for the same week.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path[0] = str(Path(__file__).resolve().parent.parent)

from sqlalchemy import insert

from tests.services import create_pg_database, drop_pg_database
from tpuq.settings import Settings
from tpuq.state.db import SCHEMA_HEAD, Database
from tpuq.state.models import Allocation, Attempt, Host, Job, Team

DAY = 86400.0
CHIPS = 8
TEAMS = ("nlp", "vision", "speech", "rl", "infra", "bio")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p * (len(values) - 1))))]


def job_row(i: int, now: float, state: str, rng: random.Random, **more: Any) -> dict[str, Any]:
    submitted = more.pop("submitted_at", now - rng.uniform(0, 3600))
    row = {"id": i, "name": f"run-{i}", "state": state, "command": ["python", "train.py"],
           "cwd": "/home/x", "env": {"PATH": "/usr/bin"}, "owner": f"user{i % 40}",
           "team": TEAMS[i % len(TEAMS)], "priority": i % 3, "chips": rng.choice((1, 2, 4, 8)),
           "tpu_type": "v4-8", "stop_signal": "SIGTERM", "grace_s": 30.0,
           "time_limit_s": rng.choice((None, 3600.0, 4 * 3600.0)), "max_retries": 0,
           "failures": 0, "preemptions": 0, "requeue_on_preempt": True, "tcmalloc": True,
           "attempt": 0, "submitted_at": submitted, "updated_at": submitted}
    row.update(more)
    return row


def fill(db: Database, open_jobs: int, ended_jobs: int, hosts: int,
         spread_days: float = 90.0) -> None:
    rng = random.Random(7)
    now = time.time()
    jobs: list[dict[str, Any]] = []
    attempts: list[dict[str, Any]] = []
    allocations: list[dict[str, Any]] = []
    for n in range(ended_jobs):
        i = n + 1
        end = now - rng.uniform(0, spread_days * DAY)
        run = rng.uniform(60, 6 * 3600)
        start = end - run
        submitted = start - rng.uniform(1, 1800)
        state = rng.choices(("succeeded", "failed", "cancelled"), (8, 1, 1))[0]
        number = 1
        if n % 10 == 0:  # preempted by maintenance halfway, resumed 5 minutes later
            mid = start + run / 2
            attempts.append({"job_id": i, "number": 1, "host": f"h{i % hosts:03}",
                             "chips": [0, 1], "assigned_at": start - 5, "started_at": start,
                             "ended_at": mid, "outcome": "preempted", "checkpoint_at": mid - 60,
                             "reason": "preempted (host notice: maintenance-event MIGRATE)"})
            start, number = mid + 300, 2
        attempts.append({"job_id": i, "number": number, "host": f"h{i % hosts:03}",
                         "chips": [0, 1], "assigned_at": start - 5, "started_at": start,
                         "ended_at": end, "outcome": state, "reason": "exited"})
        jobs.append(job_row(i, now, state, rng, submitted_at=submitted, ended_at=end,
                            attempt=number))
    free = [(f"h{h:03}", c) for h in range(hosts) for c in range(CHIPS)]
    for n in range(open_jobs):
        i = ended_jobs + n + 1
        if n < min(400, len(free)):
            host, chip = free[n]
            jobs.append(job_row(i, now, "running", rng, chips=1, attempt=1, host=host))
            attempts.append({"job_id": i, "number": 1, "host": host, "chips": [chip],
                             "assigned_at": now - 600, "started_at": now - 590})
            allocations.append({"host": host, "chip": chip, "job_id": i, "attempt": 1})
        else:
            jobs.append(job_row(i, now, "queued", rng))
    with db.write() as s:
        s.execute(insert(Host), [{"name": f"h{h:03}", "tpu_type": "v4-8",
                                  "chips": list(range(CHIPS)), "heartbeat_at": now + 3600,
                                  "draining": False} for h in range(hosts)])
        s.execute(insert(Team), [{"name": t, "share": 1.0, "budget_chip_hours": 5000.0,
                                  "budget_period": "week", "max_chips_by_type": {}}
                                 for t in TEAMS])
        for a in attempts:  # the code fence (migration 0015) refuses attempts naming no code
            a["code_revision"] = SCHEMA_HEAD
        for table, rows in ((Job, jobs), (Attempt, attempts), (Allocation, allocations)):
            for k in range(0, len(rows), 5000):
                s.execute(insert(table), rows[k:k + 5000])
        s.execute(__import__("sqlalchemy").text(
            "SELECT setval('jobs_id_seq', (SELECT max(id) FROM jobs))"))
    with db.engine.connect() as c:
        c.execute(__import__("sqlalchemy").text("ANALYZE"))
        c.commit()


def scrapes(db: Database, n: int) -> tuple[float, list[float]]:
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from tpuq.web.metrics import TpuqCollector

    registry = CollectorRegistry()
    registry.register(TpuqCollector(db, 30.0))
    t0 = time.perf_counter()
    generate_latest(registry)
    first = time.perf_counter() - t0
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        body = generate_latest(registry)
        times.append(time.perf_counter() - t0)
    assert b"tpuq_up 1.0" in body, body[-300:]
    return first, times


def list_jobs(db: Database, settings: Settings, n: int) -> list[float]:
    from tpuq.api.caller import Caller
    from tpuq.api.handlers import Api
    from tpuq.protocol import ListJobs

    api = Api(settings, db, here="bench", reasons=lambda: {})
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        api.handle(ListJobs(), Caller("bench", admin=True))
        times.append(time.perf_counter() - t0)
    return times


def passes(db: Database, settings: Settings, n: int) -> tuple[list[float], list[float]]:
    """The leader's snapshot and plan, timed in pairs: once with another process (as
    `tpuq web` is) scraping once a second, once with that process stopped (SIGSTOP),
    alternating, so both halves see the same machine load."""
    from sqlalchemy.orm import Session

    from tpuq.scheduler.passes import plan_for

    scraper = subprocess.Popen([sys.executable, __file__, "--scrape-loop", db.url],
                               stdout=subprocess.PIPE)
    assert scraper.stdout is not None
    scraper.stdout.readline()  # its first scrape is done
    alone: list[float] = []
    beside: list[float] = []
    try:
        for i in range(2 * n):
            scraping = i % 2 == 0
            os.kill(scraper.pid, signal.SIGCONT if scraping else signal.SIGSTOP)
            t0 = time.perf_counter()
            with db.engine.connect() as c, c.begin() as tx:
                with Session(c) as s:
                    len(plan_for(s, settings)[1].assignments)
                tx.rollback()
            (beside if scraping else alone).append(time.perf_counter() - t0)
    finally:
        os.kill(scraper.pid, signal.SIGCONT)
        scraper.terminate()
        scraper.wait(10)
    return alone, beside


def scrape_loop(url: str) -> None:
    """Scrape once a second until terminated (the other process of `passes`): fifteen
    times Prometheus' default rate."""
    db = Database(url)
    scrapes(db, 0)  # the first scrape reads all of history
    print("ready", flush=True)
    while True:
        time.sleep(1.0)
        scrapes(db, 0)


def pages(db: Database, settings: Settings) -> list[tuple[str, float]]:
    from starlette.testclient import TestClient

    from tpuq.state import webtokens
    from tpuq.web.app import create_app

    with db.write() as s:
        token = webtokens.issue(s, "bench", "bench")[1]
    client = TestClient(create_app(settings, db), follow_redirects=False)
    assert client.post("/login", data={"token": token}).status_code == 303
    out = []
    for path in ("/", "/chips", "/teams", "/timeline", "/history", "/history?q=run-1",
                 "/"):
        t0 = time.perf_counter()
        r = client.get(path, headers={"accept": "text/html"})
        out.append((path, time.perf_counter() - t0))
        assert r.status_code == 200, (path, r.text[:300])
    return out


def history_handler(db: Database, settings: Settings, days: float) -> tuple[int, float]:
    from tpuq.api.caller import Caller
    from tpuq.api.handlers import Api
    from tpuq.protocol import History

    t0 = time.perf_counter()
    reply = Api(settings, db, here="bench").handle(
        History(since=time.time() - days * DAY), Caller("bench", admin=True))
    return len(reply.rows), time.perf_counter() - t0  # type: ignore[attr-defined]


def first_loads(scale: int) -> None:
    small_url = create_pg_database()
    small = Database(small_url)
    try:
        small.upgrade()
        fill(small, 200, 10_000 // scale, 16, spread_days=6.5)
        cfg = Settings(database_url=small_url, home="/tmp/tpuq-bench-web", host="bench")
        for path, took in pages(small, cfg):
            print(f"first load GET {path:<18} {ms(took)}   (target <= 1 s)")
        rows, handler = history_handler(small, cfg, 7)
        print(f"baseline: the History handler for all {rows} rows of the week: {ms(handler)}")
    finally:
        small.dispose()
        drop_pg_database(small_url)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--pages", action="store_true", help="only the first loads (skip the "
                    "big database)")
    ap.add_argument("--scrape-loop", metavar="URL", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.scrape_loop:
        scrape_loop(args.scrape_loop)
        return
    scale = 10 if args.quick else 1
    if args.pages:
        first_loads(scale)
        return
    url = create_pg_database()
    db = Database(url)
    try:
        db.upgrade()
        t0 = time.perf_counter()
        fill(db, 10_000 // scale, 100_000 // scale, 64)
        print(f"filled {10_000 // scale} open and {100_000 // scale} ended jobs in "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
        settings = Settings(database_url=url, home="/tmp/tpuq-bench-web", host="bench")
        first, times = scrapes(db, 50)
        base = list_jobs(db, settings, 10)
        print(f"scrape, first (builds the settled totals): {ms(first)}")
        print(f"scrape p50 {ms(statistics.median(times))}  p95 {ms(pct(times, 0.95))}   "
              f"(target p95 <= 50 ms)   baseline ListJobs p50 {ms(statistics.median(base))}")
        alone, busy = passes(db, settings, 15)
        print(f"scheduler pass p50 alone {ms(statistics.median(alone))}, while scraping "
              f"{ms(statistics.median(busy))} "
              f"({statistics.median(busy) / statistics.median(alone):.2f}x)")
        first_loads(scale)
    finally:
        db.dispose()
        drop_pg_database(url)


if __name__ == "__main__":
    main()
