"""Fencing figures: what an agent restart costs running jobs, and how long the queue
stands still when the scheduler's leader dies.

    .venv/bin/python bench/fencing.py            # 5 rounds each, about 2 min
    .venv/bin/python bench/fencing.py --rounds 2 --json

agent restart: 4 one-chip jobs run on one fake 4-chip host (embedded), each waiting
on a gate file. The agent is then (a) SIGKILLed and started again at once, (b) handed
over with SIGUSR2 and started again, (c) SIGKILLed, the jobs' gates opened while no
agent runs, and started again after a lease. The gates open and the figures count, over
every round: jobs lost (not succeeded), jobs rerun (more than one attempt) and jobs whose
process was interrupted (its pid changed).

leader killed: two team hosts (PostgreSQL + Redis), default TPUQ_LEADER_LEASE_S; the
leader is drained (so the next job can only start on the other host) and SIGKILLed with
its keepers, a job is submitted at once, and the figure is the time from the kill to the
job's start (its attempt's `started_at`). The bound: 4/3 of the leader lease after the
dead leader's last renewal.

Uses the test harness (tests/harness.py: real `tpuq agent` processes on fake hosts) and
tests/services.py (a private redis-server, a fresh PostgreSQL database).
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
from tpuq.agent.tpu.holders import is_same_process  # noqa: E402
from tpuq.scheduler.passes import ROLE  # noqa: E402
from tpuq.settings import Settings  # noqa: E402
from tpuq.state import leader  # noqa: E402

JOBS = 4


def restart_round(tmp: Path, how: str) -> dict[str, int]:
    stack = Stack(home=tmp / "home", extra={"TPUQ_LEASE_S": "5"})
    host = FakeHost(tmp / "host", chips=JOBS)
    try:
        agent = stack.start_agent(host)
        gates = [tmp / f"gate-{i}" for i in range(JOBS)]
        ids = [stack.submit("--chips", "1", *fixture_cmd("until_gate.py", g)) for g in gates]
        procs = {i: (a.pid, a.proc_start) for i in ids for a in [stack.wait_process(i)]}
        if how == "sigusr2":
            assert agent.proc is not None
            agent.proc.send_signal(signal.SIGUSR2)
            agent.proc.wait(30)
            agent.start()
        elif how == "kill":
            agent.kill()
            agent.start()
        else:  # the jobs end while no agent runs; it comes back a lease later
            agent.kill()
            for g in gates:
                g.touch()
            wait_for(lambda: all(not is_same_process(*p) for p in procs.values()), 30,
                     "the jobs to end")
            time.sleep(5)  # the fault: the agent stays down a lease
            agent.start()
        for g in gates:
            g.touch()
        done = stack.wait_all(ids, "succeeded", "failed", "cancelled", "timeout", timeout=60)
        interrupted = 0 if how == "down" else sum(
            1 for i in ids if [a.pid for a in stack.attempts(i)] != [procs[i][0]])
        return {"lost": sum(j.state != "succeeded" for j in done),
                "rerun": sum(j.attempt > 1 for j in done), "interrupted": interrupted}
    finally:
        stack.cleanup()


def leader_round(tmp: Path) -> float:
    from tests.services import RedisServer, create_pg_database, drop_pg_database

    redis = RedisServer(tmp / "redis").start()
    url = create_pg_database()
    stack = Stack(home=tmp / "home", extra={"TPUQ_DATABASE_URL": url,
                                            "TPUQ_BROKER_URL": redis.url})
    try:
        stack.tpuq("db", "upgrade")
        hosts = [FakeHost(tmp / f"h{i}", name=f"tpu-{i}") for i in range(2)]
        agents = {h.name: stack.start_agent(h) for h in hosts}

        def current() -> str | None:
            with stack.db.read() as s:
                return leader.current(s, ROLE)

        lead = wait_for(current, 30, "a leader")
        other = next(n for n in agents if n != lead)
        wait_for(lambda: (h := stack.host(other)) is not None and h.heartbeat_at, 30, "both")
        stack.tpuq("drain", lead)
        killed = time.time()
        agents[lead].kill()
        stack.kill_keepers(next(h for h in hosts if h.name == lead))
        job_id = stack.submit("--", "/bin/true")
        job = stack.wait_state(job_id, "running", "succeeded", timeout=60)
        assert job.host == other
        started = stack.attempts(job_id)[-1].started_at
        assert started is not None
        return started - killed
    finally:
        stack.cleanup()
        drop_pg_database(url)
        redis.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ.pop("TPUQ_USER", None)
    figures: dict[str, object] = {"date": time.strftime("%Y-%m-%d"), "rounds": args.rounds}
    for how in ("kill", "sigusr2", "down"):
        total = {"lost": 0, "rerun": 0, "interrupted": 0}
        for r in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="tpuq-bench-") as d:
                for k, v in restart_round(Path(d), how).items():
                    total[k] += v
            print(f"restart {how} round {r + 1}: {total}", file=sys.stderr)
        figures[f"restart_{how}"] = {**total, "jobs": JOBS * args.rounds}
    waits = []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="tpuq-bench-") as d:
            waits.append(leader_round(Path(d)))
        print(f"leader round {r + 1}: next job started {waits[-1]:.2f}s after the kill",
              file=sys.stderr)
    lease = Settings().leader_lease_s
    figures["leader_killed_next_start_s"] = {
        "median": statistics.median(waits), "max": max(waits), "leader_lease_s": lease,
        "bound_s": lease * 4 / 3}
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"fencing figures, {figures['date']}, {args.rounds} rounds each")
    for how, words in (("kill", "SIGKILL + restart"), ("sigusr2", "SIGUSR2 hand-over"),
                       ("down", "SIGKILL, jobs end while down, restart a lease later")):
        f = figures[f"restart_{how}"]
        assert isinstance(f, dict)
        print(f"  agent {words:<52} jobs {f['jobs']:>3}  lost {f['lost']}  "
              f"rerun {f['rerun']}  interrupted {f['interrupted']}")
    w = figures["leader_killed_next_start_s"]
    assert isinstance(w, dict)
    print(f"  leader SIGKILLed -> next job starts after {w['median']:.1f} s median, "
          f"{w['max']:.1f} s max (bound {w['bound_s']:.0f} s + a pass: leader lease "
          f"{w['leader_lease_s']:g} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
