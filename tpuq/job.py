"""Job-side helper for training scripts run by tpuq (``from tpuq import job``).

Standard library only: this module is imported inside training processes, so it must not
pull in JAX, Celery, SQLAlchemy or click.  Everything degrades gracefully outside tpuq
(environment variables unset) so the same script can be run by hand.

Typical loop::

    from tpuq import job

    for step in range(start, steps):
        train_step()
        if step % k == 0 or job.preemption_requested():
            save(job.checkpoint_dir())
            job.checkpointed(step)
        if job.preemption_requested():
            job.requeue("preempted")
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import warnings
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

__all__ = [
    "EX_TEMPFAIL",
    "CheckpointURL",
    "attempt",
    "checkpoint_dir",
    "checkpointed",
    "install",
    "job_id",
    "preemption_requested",
    "requeue",
    "resumed",
]

#: Exit code that tells tpuq (and sysexits-aware schedulers) "run me again".
EX_TEMPFAIL = 75

_flag = threading.Event()
_install_lock = threading.Lock()
_installed = False
_declined = False  # JAX's preemption service owns the signal; do not retry or re-warn
_previous: Any = None


# bucket URLs a checkpoint directory may be (tpuq/checkpoints.py URL_SCHEMES: a test
# checks they agree; this module spells them itself to stay import-light)
URL_SCHEMES = ("gs://",)


class CheckpointURL(str):
    """A checkpoint directory in a bucket (``gs://...``, a deployment's shared root).

    A ``str``: pass it to Orbax, TensorStore or gcsfs as is, which write buckets
    natively (``pathlib.Path`` would turn ``gs://b`` into ``gs:/b``). ``/`` joins as on
    a path: ``job.checkpoint_dir() / "params"``.
    """

    def __truediv__(self, other: object) -> CheckpointURL:
        return CheckpointURL(self.rstrip("/") + "/" + str(other).lstrip("/"))


def checkpoint_dir() -> Path | CheckpointURL:
    """The job's checkpoint directory, the same for every attempt; created if missing.

    With a deployment-wide checkpoint root (an NFS mount, or a bucket) it is the same on
    every host, so a job resumes wherever it runs next. A bucket URL is returned as a
    :class:`CheckpointURL` and nothing is created (the writer makes its objects).
    Outside tpuq (``TPUQ_CHECKPOINT_DIR`` unset) this is ``./checkpoints``.
    """
    raw = os.environ.get("TPUQ_CHECKPOINT_DIR") or "checkpoints"
    if raw.startswith(URL_SCHEMES):
        return CheckpointURL(raw)
    path = Path(raw)
    path.mkdir(parents=True, exist_ok=True)
    return path


def resumed() -> bool:
    """True when tpuq runs this job again after an earlier attempt, with that attempt's
    checkpoint directory (``TPUQ_RESUMED=1``); False for a first attempt, and for one
    that starts over because the earlier checkpoints are on a host it cannot reach."""
    return os.environ.get("TPUQ_RESUMED") == "1"


def job_id() -> int | None:
    """The tpuq job id, or None outside tpuq."""
    return _int_env("TPUQ_JOB_ID")


def attempt() -> int:
    """The attempt number (1 for the first run); 1 outside tpuq."""
    value = _int_env("TPUQ_ATTEMPT")
    return 1 if value is None else value


def _int_env(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


def _signal_number() -> signal.Signals:
    """The preemption signal named by ``TPUQ_PREEMPT_SIGNAL`` (``SIGTERM``, ``TERM`` or ``15``)."""
    raw = os.environ.get("TPUQ_PREEMPT_SIGNAL", "").strip().upper() or "SIGTERM"
    if raw.isdigit():
        return signal.Signals(int(raw))
    if not raw.startswith("SIG"):
        raw = "SIG" + raw
    return signal.Signals[raw]


def _jax_preemption_service_active() -> bool:
    """Whether JAX's preemption service already owns the signal in this process.

    JAX installs its SIGTERM handler in C (invisible to ``signal.getsignal``), so a later
    ``signal.signal`` from us would silently replace it and break
    ``reached_preemption_sync_point`` / Orbax ``reached_preemption``.  We only look at
    modules the script already imported; importing JAX here would defeat import-lightness.
    """
    dist = sys.modules.get("jax._src.distributed")
    state = getattr(dist, "global_state", None)
    return getattr(state, "preemption_sync_manager", None) is not None


def _handler(signum: int, frame: FrameType | None) -> None:
    # Only set a flag: the training loop decides when it is safe to checkpoint.
    _flag.set()
    if callable(_previous):
        _previous(signum, frame)


def install() -> bool:
    """Install the preemption-signal handler now (idempotent). Returns True if installed.

    The handler only sets a flag and then chains to a Python-level handler that was
    installed before it (if any).  It is not installed (returns False, with a warning) when
    JAX's preemption service is already active, because replacing JAX's handler would break
    the script's own preemption protocol.  Conversely, if the script calls
    ``jax.distributed.initialize()`` *after* this, JAX's handler replaces ours and
    :func:`preemption_requested` stops seeing the signal: such scripts should use
    ``multihost_utils.reached_preemption_sync_point(step)`` or Orbax
    ``CheckpointManager.reached_preemption(step)`` instead.  Must be called from the main
    thread (a Python rule for ``signal.signal``).
    """
    global _installed, _declined, _previous
    with _install_lock:
        if _installed or _declined:
            return _installed
        if _jax_preemption_service_active():
            _declined = True
            warnings.warn(
                "tpuq.job: JAX's preemption service is active; not replacing its signal "
                "handler. Use reached_preemption_sync_point() instead.",
                RuntimeWarning,
                stacklevel=2,
            )
            return False
        signum = _signal_number()
        _previous = signal.getsignal(signum)
        signal.signal(signum, _handler)
        _installed = True
        return True


def preemption_requested() -> bool:
    """True once the job's preemption signal arrived (installs the handler on first call).

    Call it early (before long work) so the handler is in place when tpuq sends the
    signal; until the first call the signal keeps its default action (terminate).
    See :func:`install` for how this interacts with JAX's own preemption service (when
    that service owns the signal, this stays False and the script must ask JAX instead).
    """
    if not (_installed or _declined):
        install()
    return _flag.is_set()


def requeue(reason: str = "") -> NoReturn:
    """Flush output and exit with 75 (EX_TEMPFAIL): tpuq requeues the job."""
    if reason:
        print(f"tpuq.job: requeue: {reason}", file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed pipe must not turn a requeue into a crash
    sys.exit(EX_TEMPFAIL)


def checkpointed(step: int, total: int | None = None) -> None:
    """Report that a checkpoint for ``step`` is saved; no-op outside tpuq. With the
    ``total`` steps the job will take, `tpuq status` and `show` give an ETA (from the
    rate of the recent reports).

    Appends one JSON line to ``TPUQ_PROGRESS_FILE`` in a single ``write`` on an
    ``O_APPEND`` descriptor, so a reader never sees interleaved partial lines.
    """
    path = os.environ.get("TPUQ_PROGRESS_FILE")
    if not path:
        return
    rec: dict[str, float] = {"step": int(step), "time": time.time()}
    if total is not None:
        rec["total"] = int(total)
    line = json.dumps(rec) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
