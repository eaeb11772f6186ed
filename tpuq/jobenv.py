"""The job's environment: every variable a job sees from tpuq, and the functions that build it.

This module owns the contract. `tpuq submit` captures the submitter's variables here,
the agent builds each attempt's environment here, the orphan scan recognises an
attempt's processes by the marker variables named here, and `tpuq.job` (import-light,
so it keeps its own copies) reads the names defined here: a test checks they agree.

Pure functions of their inputs (the only I/O is the injectable `exists`), stdlib only,
so the submit-time check, the agent and the tests agree on what a job will see.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence

from tpuq.shapes import chip_bounds
from tpuq.spec import SpecError

TYPE_CHECKING = False  # typing costs an import; the type checker reads this as True
if TYPE_CHECKING:  # the CLI imports this module: its inputs' classes cost it nothing
    from tpuq import envinputs

# ---- what tpuq tells every attempt ----------------------------------------------------------
JOB_ID = "TPUQ_JOB_ID"
ATTEMPT = "TPUQ_ATTEMPT"
HOST = "TPUQ_HOST"
CHECKPOINT_DIR = "TPUQ_CHECKPOINT_DIR"  # the same for every attempt of a job
RESUMED = "TPUQ_RESUMED"  # "1" from the second attempt on
PREEMPT_SIGNAL = "TPUQ_PREEMPT_SIGNAL"  # the signal tpuq stops the job with
PROGRESS_FILE = "TPUQ_PROGRESS_FILE"  # where tpuq.job.checkpointed() reports steps
ARRAY_INDEX = "TPUQ_ARRAY_INDEX"  # a task's index in its array (set at submit, in its env)
# a slice job's task: its worker number, the number of workers, the slice's name
WORKER_ID = "TPUQ_WORKER_ID"
NUM_WORKERS = "TPUQ_NUM_WORKERS"
SLICE = "TPUQ_SLICE"
COORDINATOR_PORT = "JAX_COORDINATOR_PORT"  # jax.distributed's port; per subset (below)
# JAX before 0.8.1 ignores JAX_COORDINATOR_PORT; the address works in every version
# (jax `_src/distributed.py`), so a subset job gets both
COORDINATOR_ADDRESS = "JAX_COORDINATOR_ADDRESS"
# libtpu's runtime metrics server binds 8431 in every process unless this says otherwise
# (tpu-info README; marin #6985: "Address already in use")
METRICS_PORTS = "TPU_RUNTIME_METRICS_PORTS"
# Every child of an attempt inherits these: they mark a process as an attempt's (agent/tpu/holders.py).
MARKER_VARS = (JOB_ID, ATTEMPT, HOST, CHECKPOINT_DIR)
# What the job-side helper reads (tpuq/job.py spells them itself to stay import-light;
# tests/unit/test_job_helper.py checks it reads exactly these).
JOB_SIDE = (JOB_ID, ATTEMPT, CHECKPOINT_DIR, RESUMED, PREEMPT_SIGNAL, PROGRESS_FILE)

# ---- taken from the submitter's shell (tpuq submit) --------------------------------------------
# By default (`--export ALL`, as sbatch) every variable of the submitting shell passes,
# so a job computes what the same command computes in that shell (BLAS, locale, thread
# counts...), except these, each for its reason:
SESSION_VARS = {  # they describe the submitting terminal session, which the job is not in
    "DISPLAY": "an X display the job cannot reach",
    "WAYLAND_DISPLAY": "a display the job cannot reach",
    "XAUTHORITY": "the display's credentials",
    "TERM": "the terminal type; a job's output goes to a file",
    "TERM_PROGRAM": "the terminal", "TERM_PROGRAM_VERSION": "the terminal",
    "COLORTERM": "the terminal's colours", "COLUMNS": "the terminal's width",
    "LINES": "the terminal's height", "LS_COLORS": "the terminal's colours",
    "TMUX": "a tmux session", "TMUX_PANE": "a tmux pane", "STY": "a screen session",
    "WINDOW": "a screen window", "WINDOWID": "an X window",
    "DBUS_SESSION_BUS_ADDRESS": "a desktop session's bus",
    "XDG_RUNTIME_DIR": "a login session's runtime directory, gone when it ends",
    "PWD": "the shell's directory; the job starts in the submit directory anyway",
    "OLDPWD": "the shell's previous directory", "SHLVL": "the shell's nesting",
    "_": "the shell's last command", "PS1": "the prompt", "PROMPT_COMMAND": "the prompt",
    "MAIL": "the login's mailbox", "HISTFILE": "the shell's history",
}
# ...but an interactive session (`tpuq run`) runs on its caller's terminal, which these
# describe truly
TERMINAL_VARS = ("TERM", "COLORTERM", "LS_COLORS", "TERM_PROGRAM", "TERM_PROGRAM_VERSION")
SESSION_PREFIXES = ("SSH_", "XDG_SESSION_", "BYOBU_")  # an SSH connection or login session
# tpuq sets these for the account the job runs as, and for the attempt:
OWNED = ("HOME", "USER", "LOGNAME", COORDINATOR_PORT, COORDINATOR_ADDRESS)
OWNED_PREFIXES = ("TPUQ_",)
# `--export NONE` keeps only what the job needs to find its interpreter and libraries
# (`--export VAR,...` adds those variables to it).
CAPTURED = ("PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "LD_LIBRARY_PATH")
CAPTURED_PREFIXES = ("JAX_", "XLA_", "WANDB_", "HF_", "TF_CPP_", "LIBTPU_")
EXPORT_ALL, EXPORT_NONE = "ALL", "NONE"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# `--env NAME='$TPUQ_CHECKPOINT_DIR/x'`: tpuq's own variables, expanded at each attempt
_OWN_REF = re.compile(r"\$(?:\{(TPUQ_[A-Z_]+)\}|(TPUQ_[A-Z_]+))")

# ---- taken from the agent's own environment ---------------------------------------------------
FROM_AGENT = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR")
# What a login as the job's account sets (TPUQ_RUN_AS=owner); the agent's would mislead.
ACCOUNT_VARS = ("HOME", "USER", "LOGNAME")

# ---- chip subsets -------------------------------------------------------------------------------
# Inherited from a login shell, a previous attempt or the submitter, any of these would
# point libtpu at chips tpuq did not give this attempt.
PARTITION_VARS = (
    "TPU_VISIBLE_CHIPS",
    "TPU_VISIBLE_DEVICES",
    "TPU_CHIPS_PER_PROCESS_BOUNDS",
    "TPU_PROCESS_BOUNDS",
    # the names libtpu read before mid-2022 (pytorch/xla #3956), set with the current ones
    "TPU_CHIPS_PER_HOST_BOUNDS",
    "TPU_HOST_BOUNDS",
    METRICS_PORTS,
    COORDINATOR_ADDRESS,
    "TPU_PROCESS_PORT",
    "TPU_MESH_CONTROLLER_PORT",
    "TPU_MESH_CONTROLLER_ADDRESS",
    "TPU_PROCESS_ADDRESSES",
    "CLOUD_TPU_TASK_ID",
    "ALLOW_MULTIPLE_LIBTPU_LOAD",
)

# Variables of a user's shell that change what JAX and libtpu see (docs/tpu-facts.md): a
# job gets none of them from its submitter; `tpuq show` lists those it dropped.
SCRUBBED = {
    "TPU_LOAD_LIBRARY": "0 stops JAX from loading libtpu (notebook advice)",
    "TPU_WORKER_ID": "sends JAX down its GKE path (clusters/cloud_tpu_cluster.py)",
    "TPU_WORKER_HOSTNAMES": "sends JAX down its GKE path",
    "TPU_SKIP_MDS_QUERY": "hides the metadata server from libtpu and JAX",
    "TPU_ACCELERATOR_TYPE": "describes another slice than the job's chips",
}
SCRUBBED_PREFIXES = ("TPU_TOPOLOGY", "MEGASCALE_")  # another slice's shape; multislice peers


def tpuq_sets_or_clears(name: str) -> bool:
    """A TPU variable tpuq owns (chip partition, ports) or clears (SCRUBBED): never taken
    from the submitter. TPU_LIBRARY_PATH (which libtpu to load) is the user's."""
    return (name in PARTITION_VARS or name in SCRUBBED or name.startswith(SCRUBBED_PREFIXES)
            or name in (COORDINATOR_PORT, COORDINATOR_ADDRESS))


def dropped(environ: Mapping[str, str], assignments: Sequence[str] = ()) -> list[str]:
    """The TPU variables of the submitting shell (or `--env`) a job will not get."""
    names = set(environ) | {a.partition("=")[0] for a in assignments}
    return sorted(n for n in names if tpuq_sets_or_clears(n))


def single_slice_env(coordinator: str) -> dict[str, str]:
    """On a node of a multislice queued resource (MEGASCALE_* in its tpu-env metadata):
    what makes a job see one slice, its own. JAX reads these from the environment before
    the metadata (clusters/cloud_tpu_cluster.py, get_tpu_env_value); `coordinator` is the
    host of the slice's worker 0."""
    return {"MEGASCALE_NUM_SLICES": "1", "MEGASCALE_SLICE_ID": "0",
            "MEGASCALE_COORDINATOR_ADDRESS": coordinator}


# ---- TCMalloc -----------------------------------------------------------------------------------
LARGE_ALLOC_VAR = "TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"
# Silences the stack dumps large JAX arrays trigger (TPU_FACTS.md, TCMalloc).
LARGE_ALLOC_THRESHOLD = "60000000000"
_PRELOAD_SPLIT = re.compile(r"[:\s]+")


def _passes(name: str) -> bool:
    """Whether `--export ALL` takes this variable of the submitting shell."""
    return not (name in SESSION_VARS or name.startswith(SESSION_PREFIXES) or name in OWNED
                or name.startswith(OWNED_PREFIXES) or tpuq_sets_or_clears(name))


def export_names(export: str) -> tuple[str, ...] | None:
    """The names `--export VAR,...` adds to the minimal set; None for ALL; () for NONE.
    SpecError for a malformed list."""
    word = export.strip()
    if word.upper() == EXPORT_ALL:
        return None
    if word.upper() == EXPORT_NONE:
        return ()
    names = tuple(n.strip() for n in word.split(",") if n.strip())
    bad = [n for n in names if not _NAME.match(n)]
    if bad or not names:
        raise SpecError(f"bad --export {export!r}: ALL, NONE or NAME,NAME,...")
    return names


def capture(environ: Mapping[str, str], assignments: Sequence[str],
            export: str = EXPORT_ALL) -> dict[str, str]:
    """What a job takes from the submitting shell (`--export`), plus `--env NAME[=VALUE]`.

    SpecError for a malformed item or a NAME the shell does not set.
    """
    names = export_names(export)
    if names is None:
        env = {k: v for k, v in environ.items() if _passes(k)}
    else:
        env = {k: v for k, v in environ.items()
               if k in CAPTURED or k.startswith(CAPTURED_PREFIXES) or k in names}
        env = {k: v for k, v in env.items() if _passes(k)}
    for item in assignments:
        name, eq, value = item.partition("=")
        if not _NAME.match(name):
            raise SpecError(f"bad --env {item!r}: expected NAME=VALUE or NAME")
        if not eq:
            if name not in environ:
                raise SpecError(f"--env {name}: not set in this shell (use {name}=VALUE)")
            value = environ[name]
        if not tpuq_sets_or_clears(name):  # dropped() lists it for `tpuq show`
            env[name] = value
    return env


def terminal(environ: Mapping[str, str]) -> dict[str, str]:
    """What a session takes besides (capture): its caller's terminal's description."""
    return {k: environ[k] for k in TERMINAL_VARS if k in environ}


def from_agent(environ: Mapping[str, str]) -> dict[str, str]:
    """What every job inherits from the agent's own environment."""
    return {k: environ[k] for k in FROM_AGENT if k in environ}


def account_env(name: str, home: str) -> dict[str, str]:
    """HOME, USER and LOGNAME of the account a job runs as."""
    return dict(zip(ACCOUNT_VARS, (home, name, name)))


MAX_HOST_CHIPS = 8  # the largest host (shapes.BOUNDS); the port layout below needs it


def partition_ports(chips: Sequence[int], port_base: int) -> tuple[int, int, int, int]:
    """(TPU_PROCESS_PORT, TPU_MESH_CONTROLLER_PORT, JAX coordinator port, libtpu metrics
    port) for a subset.

    Keyed by the subset's lowest chip: subsets that can run at the same time are
    disjoint, so their lowest chips differ and their ports never meet. Two libtpu ports
    per chip index from `port_base`, then one coordinator port per chip index after them
    (port_base + 16 + chip), then one metrics port per chip index (port_base + 24 + chip).
    """
    low = min(chips)
    return (port_base + 2 * low, port_base + 2 * low + 1,
            port_base + 2 * MAX_HOST_CHIPS + low, port_base + 3 * MAX_HOST_CHIPS + low)


def _validate_chips(chips: Sequence[int], host_chip_count: int) -> None:
    if not chips:
        raise ValueError("a job needs at least one chip")
    if len(set(chips)) != len(chips):
        raise ValueError(f"duplicate chips in {list(chips)}")
    bad = [c for c in chips if not 0 <= c < host_chip_count]
    if bad:
        raise ValueError(f"chips {bad} do not exist on a {host_chip_count}-chip host")


def partition_env(chips: Sequence[int] | None, host_chip_count: int,
                  port_base: int, generation: str | None = None) -> dict[str, str]:
    """Variables that confine libtpu to `chips`; empty for the whole host."""
    if chips is None:
        return {}
    _validate_chips(chips, host_chip_count)
    if len(chips) >= host_chip_count:
        return {}
    process_port, mesh_port, coordinator_port, metrics_port = partition_ports(chips, port_base)
    visible = ",".join(str(c) for c in sorted(chips))
    bounds = chip_bounds(len(chips), host_chip_count, generation)
    return {
        # each subset job's jax.distributed.initialize() gets a coordinator of its own
        COORDINATOR_PORT: str(coordinator_port),
        COORDINATOR_ADDRESS: f"localhost:{coordinator_port}",
        METRICS_PORTS: str(metrics_port),
        "TPU_VISIBLE_CHIPS": visible,
        "TPU_CHIPS_PER_PROCESS_BOUNDS": bounds,
        "TPU_PROCESS_BOUNDS": "1,1,1",
        # the same under the names libtpu read before mid-2022 (pytorch/xla #3956)
        "TPU_VISIBLE_DEVICES": visible,
        "TPU_CHIPS_PER_HOST_BOUNDS": bounds,
        "TPU_HOST_BOUNDS": "1,1,1",
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


def apply_tcmalloc(env: dict[str, str], enabled: bool, path: str,
                   exists: Callable[[str], bool]) -> None:
    """Preload exactly one TCMalloc, the one that exists, or none at all."""
    others = _without_tcmalloc(env.get("LD_PRELOAD", ""))
    # A missing library only warns in ld.so, but on every exec of every child process.
    if enabled and exists(path):
        _set_preload(env, [path, *others])
    else:
        _set_preload(env, others)


def build_env(host: envinputs.HostInputs, attempt: envinputs.AttemptInputs,
              exists: Callable[[str], bool] = os.path.exists) -> dict[str, str]:
    """The complete environment of one attempt (raises ValueError for an unshapeable
    subset)."""
    job_env = attempt.job_env
    env = {**host.base, **job_env}
    for name in [n for n in env if tpuq_sets_or_clears(n)]:
        del env[name]
    env.update(host.host_env)
    env.update(partition_env(attempt.chips, host.chip_count, host.port_base, host.generation))
    own = {JOB_ID: str(attempt.job_id), ATTEMPT: str(attempt.attempt), HOST: host.name,
           CHECKPOINT_DIR: attempt.checkpoint_dir, RESUMED: "1" if attempt.resumed else "0"}
    seat = attempt.seat
    if seat is not None:
        own.update({WORKER_ID: str(seat.worker), NUM_WORKERS: str(seat.workers),
                    SLICE: seat.slice})
        if host.coordinator_port is not None:
            env[COORDINATOR_PORT] = str(host.coordinator_port)
    env.update(own)
    if ARRAY_INDEX in job_env:
        own[ARRAY_INDEX] = job_env[ARRAY_INDEX]
    for name, value in job_env.items():
        if "$TPUQ_" in value or "${TPUQ_" in value:
            env[name] = expand_own(value, own)
    if attempt.stop_signal is not None:
        env[PREEMPT_SIGNAL] = attempt.stop_signal
    if attempt.progress_file is not None:
        env[PROGRESS_FILE] = attempt.progress_file
    if "PYTHONUNBUFFERED" not in job_env:
        env["PYTHONUNBUFFERED"] = "1"
    apply_tcmalloc(env, attempt.tcmalloc, host.tcmalloc_path, exists)
    if LARGE_ALLOC_VAR not in job_env:
        env[LARGE_ALLOC_VAR] = LARGE_ALLOC_THRESHOLD
    return env


def expand_own(value: str, own: Mapping[str, str]) -> str:
    """`$TPUQ_X` / `${TPUQ_X}` replaced by the attempt's own value; anything else is left
    as written (tpuq is not a shell)."""
    return _OWN_REF.sub(lambda m: own.get(m.group(1) or m.group(2), m.group(0)), value)


def helper_env(base: Mapping[str, str]) -> dict[str, str]:
    """Environment for the agent's own helpers (gsutil and friends break under TCMalloc)."""
    env = {k: v for k, v in base.items() if not k.startswith("TCMALLOC_")}
    _set_preload(env, _without_tcmalloc(env.get("LD_PRELOAD", "")))
    return env
