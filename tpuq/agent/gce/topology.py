"""Which multi-host slice (pod) this host is a worker of, if any, and of which multislice.

From the settings (`TPUQ_SLICE_NAME`, `TPUQ_SLICE_WORKER`, `TPUQ_SLICE_TYPE`: off GCP
and in tests), else from the metadata server on GCP: `accelerator-type` (a type of more
than one host, e.g. v4-32), `agent-worker-number`, and the slice's name: the TPU node's
(`NODE_ID` in the `tpu-env` blob), else, on a VM made through Compute Engine without
the Cloud TPU attributes, one every worker derives alike (worker 0's endpoint). A host
of a single-host type is no slice's worker. A host that cannot be placed is refused
with HostUnfit (exit 78, not restarted): never a crash loop.

`worker-network-endpoints` comes in two formats (jax `clusters/cloud_tpu_cluster.py`
reads both since 0.10.0): `name:id:ip` entries, or plain hostnames.
"""

from __future__ import annotations

import re
from typing import Any

from tpuq.agent.errors import AgentError, HostUnfit
from tpuq.settings import ENV, Settings
from tpuq.shapes import Seat, slice_hosts

_ENV_LINE = re.compile(r"^\s*([A-Z_]+)\s*:\s*'?([^'\n]*)'?\s*$", re.M)
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})?$")
_IP = re.compile(r"^[0-9.]+$|^[0-9A-Fa-f:]+$")
MAX_NAME = 128


def tpu_env_value(blob: str, key: str) -> str | None:
    """One value of the `tpu-env` metadata blob (`KEY: 'value'` lines)."""
    for k, v in _ENV_LINE.findall(blob or ""):
        if k == key:
            return v.strip() or None
    return None


def endpoint_hosts(raw: str) -> list[str]:
    """The workers' addresses from `worker-network-endpoints`, in worker order: the IP of
    each `name:id:ip` entry, or the entry itself when it is a plain hostname. ValueError
    for an entry in neither format."""
    hosts = []
    for entry in (e.strip() for e in raw.strip().split(",")):
        parts = entry.split(":")
        if len(parts) == 3 and _IP.match(parts[2]) and "." in parts[2]:
            hosts.append(parts[2])
        elif len(parts) == 1 and _HOSTNAME.match(entry):
            hosts.append(entry)
        else:
            raise ValueError(f"worker-network-endpoints: cannot read {entry!r}")
    return hosts


def multislice_coordinator(topology: dict[str, Any] | None) -> str | None:
    """On a node of a multislice (MEGASCALE_* in tpu-env): the host a single-slice job's
    coordinator is on (its slice's worker 0, "localhost" when unknown); None elsewhere."""
    blob = (topology or {}).get("tpu_env") or ""
    slices = tpu_env_value(blob, "MEGASCALE_NUM_SLICES")
    if not (slices not in (None, "1") or tpu_env_value(blob, "MEGASCALE_COORDINATOR_ADDRESS")):
        return None
    try:
        return endpoint_hosts((topology or {}).get("worker_network_endpoints") or "")[0]
    except (ValueError, IndexError):
        return "localhost"


def _slice_name(topo: dict[str, Any], worker: int) -> str | None:
    """The name every worker of the slice derives alike: the TPU node's, else the
    `<type>@<worker 0's address>`, else the instance name less its `-w-<worker>`."""
    name = tpu_env_value(topo.get("tpu_env") or "", "NODE_ID")
    if name:
        return name
    try:
        first = endpoint_hosts(topo.get("worker_network_endpoints") or "")[0]
        return f"{topo.get('accelerator_type')}@{first}"
    except (ValueError, IndexError):
        pass
    instance = str(topo.get("instance_name") or "")
    suffix = f"-w-{worker}"
    return instance[: -len(suffix)] if instance.endswith(suffix) and len(instance) > len(suffix) \
        else None


def seat_of(settings: Settings, topology: dict[str, Any] | None) -> Seat | None:
    """This host's seat, or None when it is not a worker of a multi-host slice. Raises
    AgentError for settings that contradict each other (one line, naming them), and
    HostUnfit for a slice worker the metadata does not place."""
    if settings.slice_name:
        return _checked(settings.slice_name, settings.slice_worker, settings.slice_type,
                        "settings")
    topo = topology or {}
    kind = topo.get("accelerator_type")
    if not kind or slice_hosts(kind) < 2:
        return None
    worker = topo.get("agent_worker_number")
    if worker is None:
        raise HostUnfit(f"the metadata server says this is a {kind} worker but not which "
                        f"one (agent-worker-number); set {ENV['slice_name']}, "
                        f"{ENV['slice_worker']} and {ENV['slice_type']}")
    name = _slice_name(topo, worker)
    if not name:
        raise HostUnfit(f"the metadata server names no slice for this {kind} worker (no "
                        f"tpu-env NODE_ID, worker-network-endpoints or instance name "
                        f"ending -w-{worker}); set {ENV['slice_name']}, {ENV['slice_worker']} "
                        f"and {ENV['slice_type']}")
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
