"""Randomized fault runs, on both deployments, checked against what the jobs recorded.

Faults: SIGKILL of a job; `tpuq preempt`; SIGKILL of an agent restarted at once, late
(after up to two leases) or, in the team deployment, not for the rest of the run; an
agent frozen (SIGSTOP) past its lease; graceful agent restarts; reboots; and in the team
deployment a partition between one agent and PostgreSQL (tests/services.TcpProxy). The
embedded deployment runs one 4-chip host; the team deployment two.

After each run, from the jobs' own records (tests/records.py): no two processes of one
job were ever alive at once, no chip of a host was used by two jobs at once, every job
succeeded, and a job that finished its work is recorded as finished once (never run
again, unless the run itself killed that process). And nothing is left behind: no job
process, no keeper of an attempt that is over, no keeper server or spare but the live
agents' own (Stack.leftovers); once every agent is stopped at the end, no process of
tpuq's at all.

TPUQ_FAULT_RUNS sets the number of runs per deployment (default 12, what CI runs);
TPUQ_FAULT_SEED the base seed (default fixed, so CI runs the same batch every time;
`random` for a new one). The run's own seed is base + run index, printed on failure.
The long mode (`bench/faults.py`) runs hundreds and prints the figures.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests import records
from tests.e2e.conftest import fault_runs
from tests.harness import FIXTURES, AgentProc, FakeHost, Stack, wait_for
from tests.services import TcpProxy
from tpuq import localclient
from tpuq.agent.tpu.holders import is_same_process
from tpuq.spec import JobSpec
from tpuq.state import jobs
from tpuq.state.models import Attempt, Job
from tpuq.state.states import StopRequest

HOST_CHIPS = 4
LEASE_S = 3.0  # the harness's TPUQ_LEASE_S
TERMINAL = {"succeeded", "failed", "cancelled", "timeout"}
DEFAULT_SEED = 20261123


class Chaos:
    """One deployment's hosts and the faults a run may inflict on them."""

    def __init__(self, stack: Stack, tmp: Path, n_hosts: int) -> None:
        self.stack = stack
        self.tmp = tmp
        self.hosts = [FakeHost(tmp / f"host-{i}", name=f"tpu-{i}", chips=HOST_CHIPS)
                      for i in range(n_hosts)]
        self.agents: dict[str, AgentProc] = {}
        self.proxy: TcpProxy | None = None
        self.team = n_hosts > 1
        self.log: list[str] = []
        self.jobs = 0
        self.kinds: Counter[str] = Counter()  # faults injected, by action
        self.cuts: list[tuple[float, float]] = []  # when tpu-0 was cut off from PostgreSQL

    def start(self) -> None:
        for i, host in enumerate(self.hosts):
            env: dict[str, str] = {}
            if self.team and i == 0:  # tpu-0 reaches PostgreSQL through a relay
                self.proxy = TcpProxy("127.0.0.1", 5432).start()
                env["TPUQ_DATABASE_URL"] = self.proxy.url_for(
                    self.stack.extra["TPUQ_DATABASE_URL"])
            self.agents[host.name] = self.stack.start_agent(host, **env)

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()

    # ---- helpers ------------------------------------------------------------------------
    def submit(self, out: Path, seconds: float, chips: int | None) -> int:
        spec = JobSpec(command=[sys.executable, str(FIXTURES / "fault_job.py"), str(out),
                                f"{seconds:.3f}", str(HOST_CHIPS)],
                       cwd=str(self.tmp), owner="tester", team="default", chips=chips,
                       grace_s=1.0, max_retries=50).validate()
        with self.stack.db.write() as s:
            job_id = jobs.submit(s, spec)
        self.wake()
        return job_id

    def wake(self) -> None:
        from tpuq.settings import load

        cfg = load(self.stack.env(self.hosts[0]))
        localclient.wake(cfg.socket_path, cfg.deployment)

    def running(self, ids: list[int], host: str | None = None) -> list[Attempt]:
        with self.stack.db.read() as s:
            return [a for a in s.query(Attempt).filter(Attempt.job_id.in_(ids))
                    if a.pid and a.ended_at is None and host in (None, a.host)]

    def live_agents(self) -> list[AgentProc]:
        return [a for a in self.agents.values() if a.proc is not None and a.proc.poll() is None]

    def pick_agent(self, rng: random.Random) -> AgentProc | None:
        live = self.live_agents()
        return rng.choice(live) if live else None

    @staticmethod
    def killpg(a: Attempt) -> None:
        if a.proc_start and is_same_process(a.pid, a.proc_start):
            try:
                os.killpg(a.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    # ---- faults -------------------------------------------------------------------------
    def kill_child(self, rng: random.Random, ids: list[int]) -> str:
        live = self.running(ids)
        if not live:
            return "kill-child: none running"
        a = rng.choice(live)
        self.killpg(a)
        return f"kill-child job {a.job_id}.{a.number}"

    def preempt(self, rng: random.Random, ids: list[int]) -> str:
        live = self.running(ids)
        if not live:
            return "preempt: none running"
        a = rng.choice(live)
        with self.stack.db.write() as s:
            jobs.request_stop(s, a.job_id, "chaos", StopRequest.PREEMPT)
        self.wake()
        return f"preempt job {a.job_id}"

    def kill_agent(self, rng: random.Random, ids: list[int]) -> str:
        agent = self.pick_agent(rng)
        if agent is None:
            return "kill-agent: none alive"
        agent.kill()
        agent.start()
        return f"kill-agent {agent.host.name} + restart"

    def kill_agent_late(self, rng: random.Random, ids: list[int]) -> str:
        agent = self.pick_agent(rng)
        if agent is None:
            return "kill-agent-late: none alive"
        agent.kill()
        down = rng.uniform(0.5, 2.0) * LEASE_S
        time.sleep(down)  # the fault's length, not a synchronisation
        agent.start()
        return f"kill-agent {agent.host.name}, restarted after {down:.1f}s"

    def kill_agent_never(self, rng: random.Random, ids: list[int]) -> str:
        """Team: a host dies for the rest of the run (restarted before the next run)."""
        live = self.live_agents()
        if len(live) < 2:
            return "kill-agent-never: only one host alive"
        agent = rng.choice(live)
        agent.kill()
        return f"kill-agent {agent.host.name}, not restarted this run"

    def freeze_agent(self, rng: random.Random, ids: list[int]) -> str:
        agent = self.pick_agent(rng)
        if agent is None:
            return "freeze: none alive"
        frozen = rng.uniform(0.5, 2.5) * LEASE_S
        os.kill(agent.pid, signal.SIGSTOP)
        try:
            time.sleep(frozen)  # the fault's length
        finally:
            os.kill(agent.pid, signal.SIGCONT)
        return f"freeze {agent.host.name} {frozen:.1f}s"

    def cut_database(self, rng: random.Random, ids: list[int]) -> str:
        assert self.proxy is not None
        cut = rng.uniform(1.0, 3.0) * LEASE_S
        began = time.time()
        self.proxy.cut()
        try:
            time.sleep(cut)  # the partition's length
        finally:
            self.proxy.restore()
            self.cuts.append((began, time.time()))
        return f"database cut from tpu-0 for {cut:.1f}s"

    def reboot(self, rng: random.Random, ids: list[int]) -> str:
        agent = self.pick_agent(rng)
        if agent is None:
            return "reboot: none alive"
        host = agent.host
        agent.kill()
        self.stack.kill_keepers(host)
        for a in self.running(ids, host.name):
            self.killpg(a)
        host.reboot()
        agent.start()
        return f"reboot {host.name}"

    def stop_agent(self, rng: random.Random, ids: list[int]) -> str:
        agent = self.pick_agent(rng)
        if agent is None:
            return "stop-agent: none alive"
        agent.stop(timeout=30)
        agent.start()
        return f"graceful restart {agent.host.name}"

    EMBEDDED = ("kill_child", "kill_child", "preempt", "kill_agent", "kill_agent",
                "kill_agent_late", "freeze_agent", "reboot", "stop_agent")
    TEAM = (*EMBEDDED, "kill_agent_never", "freeze_agent", "cut_database")

    # ---- one run --------------------------------------------------------------------------
    def run(self, seed: int) -> list[str]:
        rng = random.Random(seed)
        out = self.tmp / f"run-{seed}.txt"
        ids = [self.submit(out, rng.uniform(0.1, 0.6), rng.choice([1, 1, 2, 4, None]))
               for _ in range(rng.randint(3, 6))]
        self.jobs += len(ids)
        done = []
        for _ in range(rng.randint(1, 3)):
            time.sleep(rng.uniform(0.0, 0.8))  # a random moment, not a synchronisation
            action = rng.choice(self.TEAM if self.team else self.EMBEDDED)
            self.kinds[action] += 1
            done.append(getattr(self, action)(rng, ids))
        self.log.extend(done)
        final = [self.stack.wait_state(i, *TERMINAL, timeout=90) for i in ids]
        for agent in self.agents.values():  # the hosts killed for good come back now
            if agent.proc is None or agent.proc.poll() is not None:
                agent.start()
        self.check(ids, final, out)
        self.nothing_left()
        return done

    def nothing_left(self) -> None:
        """Every job of every run is over: only the live agents' keeper servers and
        spares may be alive (a keeper collected, or recording its end, exits within a
        second or two)."""
        jobs = (str(FIXTURES / "fault_job.py"), str(self.tmp))
        left: list[str] = []

        def clean() -> bool:
            left[:] = self.stack.leftovers(jobs)
            return not left

        wait_for(clean, 30, "nothing left behind", on_timeout=lambda: "\n".join(left))

    def stop_all(self) -> None:
        """Every agent stopped (SIGTERM): then no process of tpuq's is left at all."""
        for agent in self.live_agents():
            agent.stop(timeout=60)
        self.nothing_left()

    def check(self, ids: list[int], final: list[Job], out: Path) -> None:
        bad = [(j.id, j.state, j.reason) for j in final if j.state != "succeeded"]
        assert not bad, f"jobs lost or failed: {bad}"
        records.check_promises(out, self.stack.db, ids, self.cut_off)

    def cut_off(self, host: str, at: float) -> bool:
        """Was `host` cut off from the database when a job ended there at `at`, or just
        before it could record the end (a lease, counting its retries)?"""
        return host == "tpu-0" and any(t0 - LEASE_S <= at <= t1 for t0, t1 in self.cuts)


def base_seed() -> int:
    raw = os.environ.get("TPUQ_FAULT_SEED", "")
    if raw == "random":
        return random.randrange(1 << 30)
    return int(raw) if raw else DEFAULT_SEED


@pytest.mark.parametrize("deployment", ["embedded", "team"])
def test_randomized_faults_never_run_a_job_twice_lose_it_or_rerun_what_finished(
        request, tmp_path, deployment):
    if deployment == "team":
        from tests.conftest import _team_stack

        stack = _team_stack(request, tmp_path / "home")
    else:
        stack = Stack(home=tmp_path / "home", extra={"TPUQ_RETRY_BACKOFF_S": "0.05"})
    stack.extra["TPUQ_RETRY_BACKOFF_S"] = "0.05"
    chaos = Chaos(stack, tmp_path, n_hosts=2 if deployment == "team" else 1)
    runs, base = fault_runs(), base_seed()
    began = time.monotonic()
    try:
        chaos.start()
        for i in range(runs):
            seed = base + i
            try:
                chaos.run(seed)
            except AssertionError as e:
                raise AssertionError(
                    f"fault run {i} failed; reproduce with TPUQ_FAULT_SEED={seed} "
                    f"TPUQ_FAULT_RUNS=1 (base seed {base}); faults so far: {chaos.log}\n"
                    f"{e}\n{stack.diagnose()}") from None
        chaos.stop_all()
        report(deployment, runs, base, chaos, time.monotonic() - began)
    finally:
        chaos.stop()
        stack.cleanup()


def report(deployment: str, runs: int, base: int, chaos: Chaos, seconds: float) -> None:
    """For bench/faults.py: what a passing batch did (TPUQ_FAULT_REPORT names a file)."""
    path = os.environ.get("TPUQ_FAULT_REPORT")
    if not path:
        return
    import json

    with open(path, "a") as f:
        f.write(json.dumps({"deployment": deployment, "runs": runs, "base_seed": base,
                            "jobs": chaos.jobs, "faults": dict(chaos.kinds),
                            "seconds": round(seconds, 1)}) + "\n")
