"""The fake Cloud TPU API's VMs as real agent processes (tests/e2e/test_fleet.py says
what differs from a TPU VM's startup script), for end-to-end tests and bench/fleet.py."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from tests.harness import AgentProc, FakeHost


class Vms:
    """The fake's VMs: an agent process per READY node, killed with everything it runs
    when the node is preempted or deleted."""

    def __init__(self, stack: Any, root: Path, lease_s: str = "600") -> None:
        self.stack, self.root, self.lease_s = stack, root, lease_s
        self.booted: list[AgentProc] = []
        self.ready_at: list[float] = []  # when each node became READY (wall clock)

    def boot(self, node: dict[str, Any]) -> None:
        md = node["metadata"]
        host = FakeHost(self.root, name=f"{md['tpuq-host-prefix']}-w0")
        host.reboot()  # a new VM: a new boot, a new machine
        host.machine_id_file.write_text(os.urandom(16).hex() + "\n")
        agent = AgentProc(self.stack, host, {
            "TPUQ_DATABASE_URL": md["tpuq-database-url"],
            "TPUQ_BROKER_URL": md["tpuq-broker-url"], "TPUQ_HOME": str(self.root / "home"),
            # long: a lease expiry must not be what requeues the job
            "TPUQ_LEASE_S": self.lease_s})
        self.ready_at.append(time.time())
        agent.start(wait=False)  # called by the fake, under its lock: never block there
        self.stack.agents.append(agent)
        self.booted.append(agent)

    def power_off(self, node: dict[str, Any]) -> None:
        """Everything on the VM dies at once: agent, keepers, jobs."""
        agent = self.booted[-1]
        agent.kill()
        self.stack.kill_keepers()
        from tpuq.state.models import Attempt

        with self.stack.db.read() as s:
            pids = [a.pid for a in s.query(Attempt) if a.pid and a.ended_at is None]
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
