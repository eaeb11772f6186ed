"""Rows the state tests need, written as the agent writes them."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from tpuq.state import hosts


def register_host(s: Session, name: str, *, tpu_type: str | None = "v4-8",
                  chips: Sequence[int] = (0, 1, 2, 3), machine: str = "m0",
                  home: str = "/home") -> hosts.Held:
    """A host registered by an agent on `machine` with state directory `home`."""
    held = hosts.Held(name, f"{name}-{machine}-{home}")
    hosts.register(s, held, hosts.AgentHome(machine, home), tpu_type=tpu_type, chips=chips,
                   boot_id="b", agent_pid=1, stale_s=30.0)
    return held
