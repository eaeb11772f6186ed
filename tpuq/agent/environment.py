"""The environment of one attempt, built on purpose rather than inherited.

A pure function of its inputs (the only I/O is the injectable `exists`), so the
submit-time shape check, the agent and the tests all agree on what a job will see.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

DEFAULT_TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"
DEFAULT_LARGE_ALLOC_THRESHOLD = "60000000000"

# Above libtpu's own ports (8431.. metrics, 8471, 8476 process port, 8482 JAX
# coordinator) so that 2 ports x 8 chips (8500..8515) collide with none of them.
DEFAULT_PORT_BASE = 8500

# Inherited from a login shell, a previous attempt or the submitter, any of these would
# point libtpu at chips tpuq did not give this attempt.
PARTITION_VARS = (
    "TPU_VISIBLE_CHIPS",
    "TPU_VISIBLE_DEVICES",
    "TPU_CHIPS_PER_PROCESS_BOUNDS",
    "TPU_PROCESS_BOUNDS",
    "TPU_PROCESS_PORT",
    "TPU_MESH_CONTROLLER_PORT",
    "TPU_MESH_CONTROLLER_ADDRESS",
    "TPU_PROCESS_ADDRESSES",
    "CLOUD_TPU_TASK_ID",
    "ALLOW_MULTIPLE_LIBTPU_LOAD",
)

# Per-process chip bounds by host size (pytorch/xla `_internal/tpu.py`, jax
# `test_multiprocess.py`). Unverified: 2 chips on an 8-chip host ("1,2,1"); TPU_FACTS
# lists only 1, 4 and 8 there. A 1-chip host has no subsets but a shape all the same.
_BOUNDS: dict[int, dict[int, str]] = {
    1: {1: "1,1,1"},
    4: {1: "1,1,1", 2: "1,2,1", 4: "2,2,1"},
    8: {1: "1,1,1", 2: "1,2,1", 4: "2,2,1", 8: "2,4,1"},
}

_PRELOAD_SPLIT = re.compile(r"[:\s]+")


def allowed_chip_counts(host_chip_count: int) -> list[int]:
    """Chip counts a job may ask for on a host of this size (whole host always)."""
    return sorted(set(_BOUNDS.get(host_chip_count, {})) | {host_chip_count})


def chip_bounds(n_chips: int, host_chip_count: int) -> str:
    """TPU_CHIPS_PER_PROCESS_BOUNDS for `n_chips` on a `host_chip_count`-chip host."""
    shape = _BOUNDS.get(host_chip_count, {}).get(n_chips)
    if shape is None:
        allowed = ", ".join(str(n) for n in allowed_chip_counts(host_chip_count))
        raise ValueError(
            f"cannot run a {n_chips}-chip job on a {host_chip_count}-chip host: "
            f"allowed chip counts are {allowed}"
        )
    return shape


def partition_ports(chips: list[int], port_base: int | None) -> tuple[int, int]:
    """(TPU_PROCESS_PORT, TPU_MESH_CONTROLLER_PORT) for a chip subset.

    Two ports per chip index, keyed by the subset's lowest chip: subsets that can run at
    the same time are disjoint, so their lowest chips differ and their ports never meet.
    """
    base = DEFAULT_PORT_BASE if port_base is None else port_base
    first = 2 * min(chips)
    return base + first, base + first + 1


def _validate_chips(chips: list[int], host_chip_count: int) -> None:
    if not chips:
        raise ValueError("a job needs at least one chip")
    if len(set(chips)) != len(chips):
        raise ValueError(f"duplicate chips in {chips}")
    bad = [c for c in chips if not 0 <= c < host_chip_count]
    if bad:
        raise ValueError(f"chips {bad} do not exist on a {host_chip_count}-chip host")


def partition_env(
    chips: list[int] | None, host_chip_count: int, port_base: int | None
) -> dict[str, str]:
    """Variables that confine libtpu to `chips`; empty for the whole host."""
    if chips is None:
        return {}
    _validate_chips(chips, host_chip_count)
    if len(chips) >= host_chip_count:
        return {}
    process_port, mesh_port = partition_ports(chips, port_base)
    return {
        "TPU_VISIBLE_CHIPS": ",".join(str(c) for c in sorted(chips)),
        "TPU_CHIPS_PER_PROCESS_BOUNDS": chip_bounds(len(chips), host_chip_count),
        "TPU_PROCESS_BOUNDS": "1,1,1",
        "TPU_PROCESS_PORT": str(process_port),
        "TPU_MESH_CONTROLLER_PORT": str(mesh_port),
        # Older libtpu reads the address rather than the port (skye's subset gist).
        "TPU_MESH_CONTROLLER_ADDRESS": f"localhost:{mesh_port}",
        # libtpu's own lock would let only one subset job run; tpuq's per-chip locks
        # take its place.
        "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
    }


def _is_tcmalloc(entry: str) -> bool:
    return "libtcmalloc" in os.path.basename(entry)


def _without_tcmalloc(preload: str) -> list[str]:
    return [e for e in _PRELOAD_SPLIT.split(preload) if e and not _is_tcmalloc(e)]


def _set_preload(env: dict[str, str], entries: list[str]) -> None:
    if entries:
        env["LD_PRELOAD"] = ":".join(entries)
    else:
        env.pop("LD_PRELOAD", None)


def apply_tcmalloc(
    env: dict[str, str], enabled: bool, path: str, exists: Callable[[str], bool]
) -> None:
    """Preload exactly one TCMalloc, the one that exists, or none at all."""
    others = _without_tcmalloc(env.get("LD_PRELOAD", ""))
    # A missing library only warns in ld.so, but on every exec of every child process.
    if enabled and exists(path):
        _set_preload(env, [path, *others])
    else:
        _set_preload(env, others)


def build_env(
    *,
    base: dict[str, str],
    job_env: dict[str, str],
    job_id: int,
    attempt: int,
    host: str,
    checkpoint_dir: str,
    resumed: bool,
    chips: list[int] | None,
    host_chip_count: int,
    port_base: int | None,
    tcmalloc: bool,
    tcmalloc_path: str = DEFAULT_TCMALLOC,
    exists: Callable[[str], bool] = os.path.exists,
) -> dict[str, str]:
    """The complete environment of one attempt (raises ValueError for an unshapeable subset)."""
    env = {**base, **job_env}
    for name in PARTITION_VARS:
        env.pop(name, None)
    env.update(partition_env(chips, host_chip_count, port_base))
    env.update(
        TPUQ_JOB_ID=str(job_id),
        TPUQ_ATTEMPT=str(attempt),
        TPUQ_HOST=host,
        TPUQ_CHECKPOINT_DIR=checkpoint_dir,
        TPUQ_RESUMED="1" if resumed else "0",
    )
    if "PYTHONUNBUFFERED" not in job_env:
        env["PYTHONUNBUFFERED"] = "1"
    apply_tcmalloc(env, tcmalloc, tcmalloc_path, exists)
    if "TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD" not in job_env:
        env["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"] = DEFAULT_LARGE_ALLOC_THRESHOLD
    return env


def helper_env(base: dict[str, str]) -> dict[str, str]:
    """Environment for the agent's own helpers (gsutil and friends break under TCMalloc)."""
    env = {k: v for k, v in base.items() if not k.startswith("TCMALLOC_")}
    _set_preload(env, _without_tcmalloc(env.get("LD_PRELOAD", "")))
    return env
