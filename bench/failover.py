"""Failover figures: a dead host's job running elsewhere, and a gang whose worker's host
died stopped and requeued.

    .venv/bin/python bench/failover.py                    # everything below, ~5 min
    .venv/bin/python bench/failover.py --only host --settings default --rounds 1
    .venv/bin/python bench/failover.py --only gang --workers 16 --json

Host death (team deployment: PostgreSQL, a private Redis, two fake 4-chip hosts): a job
(`sleep`) runs on host B, and B dies at t0 (its agent, its keepers and the job's process
group SIGKILLed). Figure: t0 -> the job's next attempt started on host A
(`attempts.started_at`, the database's clock, this machine's). Baseline, same round: the
lease the job still held at t0 (`jobs.lease_expires_at` - t0); no requeue may come before
it (the dead host's keeper could still be running the job until then). The difference is
what failover adds: the reaper's confirmation, its tick, a scheduling pass, the start.
Twice: B is not the scheduler's leader (A leads), and B led it too (A must take the lead
over first: within 4/3 of TPUQ_LEADER_LEASE_S, 6 s, of B's death).

Gang (embedded deployment, as bench/slices.py: N agents on one machine form a fake
slice): a slice job of `gang_task.py deaf` with `--grace 600` (its workers ignore the
stop signal, as JAX's preemption service does while a peer is dead) runs on every
worker, and the last worker's host dies at t0. Figures: t0 -> the gang's stop requested
(the job's `preempting` event), t0 -> the job requeued (its `queued` event). Baseline:
the lease the dead worker's row still held at t0 (`gang_workers.lease_expires_at` - t0).

Settings: `test` is the test harness's (lease 3 s, heartbeat 0.5 s, host stale 5 s);
`default` is tpuq's own (lease 30 s, heartbeat 2 s, host stale 30 s, poll 2 s).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parent.parent)

from tests.harness import FakeHost, Stack, fixture_cmd, wait_for  # noqa: E402
from tests.services import RedisServer, create_pg_database, drop_pg_database  # noqa: E402
from tpuq.state.models import GangWorker, JobEvent  # noqa: E402

TYPES = {4: "v4-32", 16: "v4-128"}
DEFAULTS = {"TPUQ_LEASE_S": "30", "TPUQ_HEARTBEAT_S": "2", "TPUQ_HOST_STALE_S": "30",
            "TPUQ_POLL_S": "2"}


def die(stack: Stack, host: FakeHost, pid: int | None) -> float:
    """The host dies now: its agent, keepers and the job's process group."""
    t0 = time.time()
    next(a for a in stack.agents if a.host is host).kill()
    stack.kill_keepers(host)
    if pid:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return t0


def leads(stack: Stack, name: str) -> bool:
    from tpuq.state import leader

    with stack.db.read() as s:
        return leader.current(s, "scheduler") == name


def host_round(tmp: Path, settings: dict[str, str], dead_leads: bool) -> dict[str, float]:
    """`dead_leads`: the dead host also led the scheduler (the other takes over first)."""
    redis = RedisServer(tmp / "redis").start()
    pg = create_pg_database()
    stack = Stack(home=tmp / "home", extra={"TPUQ_DATABASE_URL": pg,
                                            "TPUQ_BROKER_URL": redis.url, **settings})
    try:
        stack.tpuq("db", "upgrade")
        a, b = (FakeHost(tmp / n, name=n, chips=4) for n in ("tpu-a", "tpu-b"))
        first_up = b if dead_leads else a
        stack.start_agent(first_up)
        wait_for(lambda: leads(stack, first_up.name), 120, "the first agent to lead")
        if dead_leads:
            job = stack.submit("--", "sleep", "3600")
            first = stack.wait_process(job, timeout=120)
            stack.start_agent(a)
        else:  # the job goes to B: A takes nothing while it drains
            stack.tpuq("drain", "tpu-a")
            stack.start_agent(b)
            job = stack.submit("--", "sleep", "3600")
            first = stack.wait_process(job, timeout=120)
            stack.tpuq("undrain", "tpu-a")
        assert first.host == "tpu-b", first.host
        lease = stack.job(job).lease_expires_at or 0.0
        t0 = die(stack, b, first.pid)
        second = wait_for(lambda: (at := stack.attempts(job)[-1]).host == "tpu-a"
                          and at.started_at and at, 300, "the job running on tpu-a")
        return {"lease_left_s": lease - t0, "running_elsewhere_s": second.started_at - t0}
    finally:
        stack.cleanup()
        redis.stop()
        drop_pg_database(pg)


def event_at(stack: Stack, job: int, attempt: int, state: str) -> float | None:
    with stack.db.read() as s:
        e = s.query(JobEvent).filter_by(job_id=job, attempt=attempt, to_state=state).first()
        return e.at if e else None


def gang_round(tmp: Path, n: int, settings: dict[str, str]) -> dict[str, float]:
    stack = Stack(home=tmp / "home", extra=dict(settings))
    try:
        hosts = []
        for i in range(n):
            env = {"TPUQ_SLICE_NAME": "bench", "TPUQ_SLICE_WORKER": str(i),
                   "TPUQ_SLICE_TYPE": TYPES[n]}
            if i:
                env["TPUQ_AGENT_SOCKET"] = str(tmp / f"w{i}.sock")
            hosts.append(FakeHost(tmp / f"w{i}", name=f"bench-w{i}", chips=4))
            stack.start_agent(hosts[-1], **env)
        out = tmp / "out"
        out.mkdir()
        job = stack.submit("--tpu-type", TYPES[n], "--grace", "600",
                           *fixture_cmd("gang_task.py", out, "deaf"))

        def rows() -> list[GangWorker]:
            with stack.db.read() as s:
                return list(s.query(GangWorker).filter_by(job_id=job, attempt=1)
                            .order_by(GangWorker.worker))

        wait_for(lambda: sum(1 for g in rows() if g.pid) == n, 300, "every worker to run")
        victim = rows()[-1]
        lease = victim.lease_expires_at or 0.0
        t0 = die(stack, hosts[-1], victim.pid)
        stopped = wait_for(lambda: event_at(stack, job, 1, "preempting"), 300, "gang stop")
        queued = wait_for(lambda: event_at(stack, job, 1, "queued"), 300, "requeued")
        return {"lease_left_s": lease - t0, "gang_stopped_s": stopped - t0,
                "requeued_s": queued - t0}
    finally:
        stack.cleanup()


def medians(results: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in results) for k in results[0]}


def run(what: str, rounds: int, fn, *args) -> dict:  # type: ignore[no-untyped-def]
    results = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="tpuq-failover-") as d:
            results.append(fn(Path(d), *args))
        print(f"  {what}: {json.dumps(results[-1])}", file=sys.stderr)
    return {"what": what, "rounds": results, "median": medians(results)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("host", "gang"))
    ap.add_argument("--settings", choices=("test", "default"))
    ap.add_argument("--workers", type=int, choices=sorted(TYPES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    chosen = [args.settings] if args.settings else ["test", "default"]
    figures = []
    if args.only in (None, "host"):
        for name in chosen:
            env = DEFAULTS if name == "default" else {}
            for dead_leads in (False, True):
                what = "host death" + (" (it led the scheduler)" if dead_leads else "")
                figures.append(run(f"{what}, {name} settings", args.rounds, host_round, env,
                                   dead_leads))
    if args.only in (None, "gang"):
        for n in [args.workers] if args.workers else sorted(TYPES):
            figures.append(run(f"gang of {n}, worker lost, test settings", args.rounds,
                               gang_round, n, {}))
    if args.json:
        print(json.dumps(figures))
        return
    for f in figures:
        m = f["median"]
        print(f"{f['what']} (median of {len(f['rounds'])}):")
        print(f"  lease the lost work still held (the floor)  {m['lease_left_s']:7.1f} s")
        for key in ("running_elsewhere_s", "gang_stopped_s", "requeued_s"):
            if key in m:
                print(f"  {key.replace('_s', '').replace('_', ' '):<42} {m[key]:7.1f} s"
                      f"   (+{m[key] - m['lease_left_s']:.1f} s past the lease)")


if __name__ == "__main__":
    main()
