"""Randomized fault runs: SIGKILL of the agent or of a job at random moments, agent
restarts (hard and graceful), reboots and `tpuq preempt`, while several jobs share one
4-chip host. After each run: no job ran twice at once, no job was lost, no chip was
double-booked.

TPUQ_FAULT_RUNS sets the number of runs (default 50); TPUQ_FAULT_SEED the base seed
(random by default; printed on failure, and the run's own seed is base + run index).

Duplicate doorbells are not injected here: in the embedded deployment the doorbell is an
in-process call that a test cannot repeat from outside; duplicate and stale delivery is
covered at the state level (tests/state) where the compare-and-set fences it.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from pathlib import Path

from tests.e2e.conftest import fault_runs
from tests.harness import FIXTURES, FakeHost, Stack
from tpuq import localclient
from tpuq.agent.holders import is_same_process
from tpuq.spec import JobSpec
from tpuq.state import jobs
from tpuq.state.models import Allocation, Attempt, Job
from tpuq.state.states import StopRequest

HOST_CHIPS = 4
TERMINAL = {"succeeded", "failed", "cancelled", "timeout"}


class Chaos:
    def __init__(self, tmp: Path) -> None:
        self.stack = Stack(home=tmp / "home", extra={"TPUQ_RETRY_BACKOFF_S": "0.05"})
        self.host = FakeHost(tmp / "host", name="tpu-a", chips=HOST_CHIPS)
        self.tmp = tmp

    def start(self) -> None:
        self.agent = self.stack.start_agent(self.host)

    # ---- actions ------------------------------------------------------------------------
    def submit(self, out: Path, seconds: float, chips: int | None) -> int:
        spec = JobSpec(command=[sys.executable, str(FIXTURES / "fault_job.py"), str(out),
                                f"{seconds:.3f}", str(HOST_CHIPS)],
                       cwd=str(self.tmp), owner="tester", team="default", chips=chips,
                       grace_s=2.0, max_retries=50).validate()
        with self.stack.db.write() as s:
            job_id = jobs.submit(s, spec)
        self.wake()
        return job_id

    def wake(self) -> None:
        from tpuq.settings import load

        cfg = load(self.stack.env(self.host))
        localclient.wake(cfg.socket_path, cfg.deployment)

    def running(self, ids: list[int]) -> list[Attempt]:
        with self.stack.db.read() as s:
            return [a for a in s.query(Attempt).filter(Attempt.job_id.in_(ids))
                    if a.pid and a.ended_at is None]

    def kill_child(self, rng: random.Random, ids: list[int]) -> str:
        live = self.running(ids)
        if not live:
            return "kill-child: none running"
        a = rng.choice(live)
        if a.proc_start and is_same_process(a.pid, a.proc_start):
            try:
                os.killpg(a.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
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
        self.agent.kill()
        self.agent.start()
        return "kill-agent + restart"

    def reboot(self, rng: random.Random, ids: list[int]) -> str:
        self.agent.kill()
        for a in self.running(ids):
            if a.proc_start and is_same_process(a.pid, a.proc_start):
                try:
                    os.killpg(a.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.host.reboot()
        self.agent.start()
        return "reboot"

    def stop_agent(self, rng: random.Random, ids: list[int]) -> str:
        self.agent.stop(timeout=30)
        self.agent.start()
        return "graceful agent restart"

    ACTIONS = ("kill_child", "kill_child", "preempt", "kill_agent", "kill_agent", "reboot",
               "stop_agent")

    # ---- one run --------------------------------------------------------------------------
    def run(self, seed: int) -> list[str]:
        rng = random.Random(seed)
        out = self.tmp / f"run-{seed}.txt"
        ids = [self.submit(out, rng.uniform(0.1, 0.6), rng.choice([1, 1, 2, 4, None]))
               for _ in range(rng.randint(3, 5))]
        done = []
        for _ in range(rng.randint(1, 3)):
            time.sleep(rng.uniform(0.0, 0.8))  # a random moment, not a synchronisation
            done.append(getattr(self, rng.choice(self.ACTIONS))(rng, ids))
        if self.agent.proc is None or self.agent.proc.poll() is not None:
            self.agent.start()
        final = [self.stack.wait_state(i, *TERMINAL, timeout=60) for i in ids]
        self.check(ids, final, out)
        return done

    def check(self, ids: list[int], final: list[Job], out: Path) -> None:
        bad = [(j.id, j.state, j.reason) for j in final if j.state != "succeeded"]
        assert not bad, f"jobs lost or failed: {bad}"
        lines = out.read_text().splitlines() if out.exists() else []
        overlaps = [ln for ln in lines if ln.startswith("OVERLAP")]
        assert not overlaps, f"ran twice at once or on a taken chip: {overlaps}"
        with self.stack.db.read() as s:
            allocs = s.query(Allocation).count()
            spans = [(a.job_id, a.number, set(a.chips), a.started_at, a.ended_at)
                     for a in s.query(Attempt).filter(Attempt.job_id.in_(ids))]
        assert allocs == 0, f"{allocs} chip allocations left after every job ended"
        started = [sp for sp in spans if sp[3] is not None]
        for sp in started:
            assert sp[4] is not None, f"attempt {sp[0]}.{sp[1]} never ended"
        for i, a in enumerate(started):
            for b in started[i + 1:]:
                if a[0] == b[0] or a[2] & b[2]:
                    assert a[4] <= b[3] or b[4] <= a[3], \
                        f"attempts {a[0]}.{a[1]} and {b[0]}.{b[1]} overlap in time ({a}, {b})"


def test_randomized_faults_never_run_a_job_twice_lose_it_or_double_book_a_chip(tmp_path):
    runs = fault_runs()
    base = int(os.environ.get("TPUQ_FAULT_SEED") or random.randrange(1 << 30))
    chaos = Chaos(tmp_path)
    try:
        chaos.start()
        for i in range(runs):
            seed = base + i
            try:
                chaos.run(seed)
            except AssertionError as e:
                raise AssertionError(
                    f"fault run {i} failed; reproduce with TPUQ_FAULT_SEED={seed} "
                    f"TPUQ_FAULT_RUNS=1 (base seed {base}):\n{e}\n{chaos.stack.diagnose()}"
                ) from None
    finally:
        chaos.stack.cleanup()
