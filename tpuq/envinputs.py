"""The inputs of one attempt's environment (jobenv.build_env): what the host gives every
attempt, and what is the attempt's own. A module apart from jobenv, which the CLI imports:
building these classes at import is a cost only the agent should pay."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tpuq.shapes import Seat


@dataclass(frozen=True)
class HostInputs:
    """What this host gives every attempt's environment: `base`, the agent's own (what a
    job inherits); `host_env`, what the host adds for every job (single_slice_env);
    `generation` picks the bounds table's row (shapes.py); a slice job's JAX coordinator
    listens on `coordinator_port`."""

    name: str
    base: Mapping[str, str]
    chip_count: int
    port_base: int
    tcmalloc_path: str
    generation: str | None = None
    host_env: Mapping[str, str] = field(default_factory=dict)
    coordinator_port: int | None = None


@dataclass(frozen=True)
class AttemptInputs:
    """What is one attempt's own: its job's env and identity, its chips (None: the whole
    host), and a slice job's task's `seat` (the metadata is left alone: a bare
    jax.distributed.initialize() finds its peers there on a TPU VM)."""

    job_env: Mapping[str, str]
    job_id: int
    attempt: int
    checkpoint_dir: str
    resumed: bool
    chips: Sequence[int] | None
    tcmalloc: bool
    stop_signal: str | None = None
    progress_file: str | None = None
    seat: Seat | None = None
