"""The fleet controller: how fast a preempted VM's jobs are requeued and run again, and
the long mode of its property test.

    .venv/bin/python bench/fleet.py                  # recovery figures (~2 min on 2 cores)
    .venv/bin/python bench/fleet.py --long 20000     # 20,000 random sequences (memory)
    .venv/bin/python bench/fleet.py --long 2000 --real   # ...through SQLite and the client

Recovery (team deployment: PostgreSQL, a private Redis, real agents): one slot of one
spot v4-8 kept by `tpuq fleet controller` (TPUQ_FLEET_POLL_S=POLL_S) through the real
google-cloud-tpu client against the fake Cloud TPU API over HTTP, whose VMs are agent
processes (tests/fleet/vms.py) and take PROVISION_S from create to READY. A static host
with one chip runs the scheduler and the reaper and cannot take the 4-chip job, so the
job runs on the fleet's VM only. Once the job runs there, the VM is preempted (spot:
deleted, every process on it killed) at t0:

- t0 -> host marked lost: the host row's lost_reason appears;
- t0 -> jobs requeued: the job's `queued` event;
  baseline, same run: the same preemption with the controller stopped, where the lease
  (TPUQ_LEASE_S=LEASE_S) expiring is what requeues it;
- t0 -> replacement READY -> its agent registered -> job running again (attempt 2's
  start), with the fake's provisioning delay stated beside it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

POLL_S = 1.0
PROVISION_S = 5.0
LEASE_S = 15.0
FLEET = """
[[slot]]
name = "v4"
accelerator_type = "v4-8"
runtime_version = "tpu-ubuntu2204-base"
project = "proj"
zone = "us-central2-b"
capacity = "spot"
"""


def wait(pred: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


def recovery(controller_acts: bool) -> dict[str, float]:
    from sqlalchemy import select

    from tests.fakes.tpu_api import FakeCloud
    from tests.fakes.tpu_http import FakeTpuServer
    from tests.fleet.vms import Vms
    from tests.harness import TPUQ, FakeHost, Stack
    from tests.services import RedisServer, create_pg_database, drop_pg_database
    from tpuq.state.models import Attempt, Host, JobEvent

    tmp = Path(tempfile.mkdtemp(prefix="tpuq-bench-fleet-"))
    redis = RedisServer(tmp / "redis").start()
    pg = create_pg_database()
    stack = Stack(home=tmp / "home", extra={
        "TPUQ_DATABASE_URL": pg, "TPUQ_BROKER_URL": redis.url, "TPUQ_LEASE_S": str(LEASE_S)})
    cloud = FakeCloud(clock=time.time)
    cloud.faults.create_s, cloud.faults.delete_s = PROVISION_S, 0.5
    vms = Vms(stack, tmp / "vm", lease_s=str(LEASE_S))
    cloud.on_ready, cloud.on_gone = vms.boot, vms.power_off
    server = FakeTpuServer(cloud).start()
    controller = None
    try:
        stack.tpuq("db", "upgrade")
        stack.start_agent(FakeHost(tmp / "static", name="static-0", chips=1))
        (tmp / "fleet.toml").write_text(FLEET)
        stack.tpuq("fleet", "apply", str(tmp / "fleet.toml"))
        log = open(tmp / "controller.log", "wb")
        controller = subprocess.Popen(
            [*TPUQ, "fleet", "controller"], stdout=log, stderr=subprocess.STDOUT,
            env=stack.env(TPUQ_TPU_API_ENDPOINT=server.endpoint, TPUQ_FLEET_POLL_S=str(POLL_S)))
        wait(lambda: stack.host("v4-0-w0"), 60, "the fleet VM's agent")
        job = stack.submit("--chips", "4", "--", sys.executable, "-c",
                           "import time; time.sleep(3600)")
        wait(lambda: (a := stack.attempts(job)) and a[-1].started_at, 60, "the job to run")
        if not controller_acts:
            controller.send_signal(signal.SIGTERM)
            controller.wait(30)
        t0 = time.time()
        assert cloud.preempt("tpuq-v4-0-g1")
        out: dict[str, float] = {}

        def requeued() -> float | None:
            with stack.db.read() as s:
                return s.scalar(select(JobEvent.at).where(JobEvent.job_id == job,
                                                          JobEvent.to_state == "queued",
                                                          JobEvent.at >= t0))

        def lost() -> float | None:
            with stack.db.read() as s:
                h = s.get(Host, "v4-0-w0", populate_existing=True)
                return time.time() if h is not None and h.lost_reason else None

        if controller_acts:
            out["lost_s"] = wait(lost, 60, "the host marked lost") - t0
        out["requeued_s"] = wait(requeued, 120, "the job requeued") - t0
        if controller_acts:
            ready = wait(lambda: len(vms.ready_at) > 1 and vms.ready_at[1], 120, "a new VM")
            out["ready_s"] = ready - t0

            def registered() -> float | None:
                with stack.db.read() as s:
                    h = s.get(Host, "v4-0-w0", populate_existing=True)
                    return h.started_at if h and h.started_at and h.started_at > t0 else None

            out["joined_s"] = wait(registered, 120, "its agent") - t0

            def second() -> float | None:
                with stack.db.read() as s:
                    return s.scalar(select(Attempt.started_at).where(Attempt.job_id == job,
                                                                     Attempt.number == 2))

            try:
                out["running_s"] = wait(second, 120, "the job running again") - t0
            except RuntimeError:
                print(stack.tpuq("status").stdout, stack.diagnose()[-3000:], file=sys.stderr)
                raise
        return out
    finally:
        if controller is not None and controller.poll() is None:
            controller.kill()
            controller.wait(10)
        stack.cleanup()
        server.stop()
        redis.stop()
        drop_pg_database(pg)


def long_mode(examples: int, real: bool) -> None:
    if real:
        os.environ["TPUQ_FLEET_REAL"] = "1"
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test

    from tests.fleet.machine import FleetMachine

    started = time.monotonic()
    run_state_machine_as_test(FleetMachine, settings=settings(
        max_examples=examples, stateful_step_count=30, deadline=None, database=None,
        suppress_health_check=list(HealthCheck)))
    took = time.monotonic() - started
    print(f"{examples} sequences (up to 30 steps each, {'SQLite + google-cloud-tpu' if real else 'memory'}"
          f"): 0 duplicate creates, 0 slots with two VMs, every slot READY and nothing dead "
          f"left at the end of each; {took:.0f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--long", type=int, metavar="N", help="run N property-test sequences")
    p.add_argument("--real", action="store_true", help="--long through SQLite and the client")
    args = p.parse_args()
    import logging

    logging.disable(logging.WARNING)
    if args.long:
        long_mode(args.long, args.real)
        return
    print(f"fleet recovery (fake API: {PROVISION_S:g} s from create to READY; controller "
          f"polls every {POLL_S:g} s; lease {LEASE_S:g} s)", flush=True)
    with_c = recovery(controller_acts=True)
    base = recovery(controller_acts=False)
    print(f"  preemption -> host marked lost         {with_c['lost_s']:6.2f} s")
    print(f"  preemption -> job requeued             {with_c['requeued_s']:6.2f} s   "
          f"baseline, lease expiry without the controller: {base['requeued_s']:6.2f} s "
          f"({base['requeued_s'] / with_c['requeued_s']:.0f}x)")
    print(f"  preemption -> replacement READY        {with_c['ready_s']:6.2f} s   "
          f"(of which provisioning {PROVISION_S:g} s)")
    print(f"  preemption -> its agent registered     {with_c['joined_s']:6.2f} s")
    print(f"  preemption -> job running again        {with_c['running_s']:6.2f} s")


if __name__ == "__main__":
    main()
