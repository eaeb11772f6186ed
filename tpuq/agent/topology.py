"""Which multi-host slice (pod) this host is a worker of, if any.

From the settings (`TPUQ_SLICE_NAME`, `TPUQ_SLICE_WORKER`, `TPUQ_SLICE_TYPE`: off GCP
and in tests), else from the metadata server on GCP: `accelerator-type` (a type of more
than one host, e.g. v4-32), `agent-worker-number`, and the TPU node's name from the
`tpu-env` blob (`NODE_ID`). A host of a single-host type is no slice's worker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tpuq.agent.errors import AgentError
from tpuq.settings import ENV, Settings
from tpuq.shapes import slice_hosts

_ENV_LINE = re.compile(r"^\s*([A-Z_]+)\s*:\s*'?([^'\n]*)'?\s*$", re.M)
MAX_NAME = 128


@dataclass(frozen=True)
class Seat:
    """This host's place in a slice."""

    slice: str
    worker: int
    tpu_type: str  # the slice's type, e.g. "v4-32"

    @property
    def workers(self) -> int:
        return slice_hosts(self.tpu_type)


def tpu_env_value(blob: str, key: str) -> str | None:
    """One value of the `tpu-env` metadata blob (`KEY: 'value'` lines)."""
    for k, v in _ENV_LINE.findall(blob or ""):
        if k == key:
            return v.strip() or None
    return None


def seat_of(settings: Settings, topology: dict[str, Any] | None) -> Seat | None:
    """This host's seat, or None when it is not a worker of a multi-host slice. Raises
    AgentError for settings that contradict each other (one line, naming them)."""
    if settings.slice_name:
        return _checked(settings.slice_name, settings.slice_worker, settings.slice_type,
                        "settings")
    topo = topology or {}
    kind = topo.get("accelerator_type")
    if not kind or slice_hosts(kind) < 2:
        return None
    worker = topo.get("agent_worker_number")
    if worker is None:
        raise AgentError(f"the metadata server says this is a {kind} worker but not which "
                         f"one (agent-worker-number); set {ENV['slice_worker']}")
    name = tpu_env_value(topo.get("tpu_env") or "", "NODE_ID")
    if not name:
        raise AgentError(f"the metadata server names no TPU node for this {kind} worker "
                         f"(tpu-env NODE_ID); set {ENV['slice_name']}")
    return _checked(name, worker, kind, "the metadata server")


def _checked(name: str, worker: int, kind: str, source: str) -> Seat:
    n = slice_hosts(kind) if kind else 0
    if n < 2:
        raise AgentError(f"{source}: slice {name!r} needs a multi-host type in "
                         f"{ENV['slice_type']} (e.g. v4-32), got {kind!r}")
    if not 0 <= worker < n:
        raise AgentError(f"{source}: worker {worker} of a {kind} slice must be 0..{n - 1} "
                         f"({ENV['slice_worker']})")
    if len(name) > MAX_NAME or not name.isprintable():
        raise AgentError(f"{source}: slice name {name[:40]!r} is not a usable name")
    return Seat(name, worker, kind)
