"""How an attempt ended, in words, and whether its output says the TPU did not start.

The patterns must match what libtpu and JAX really print; each names its source (and
docs/tpu-facts.md lists them). They only read the output: whether a failure is the
host's (a holder of the chips) or the job's is decided in attempts/outcome.py.
"""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass

# sysexits.h: "try again later"; `tpuq.job.requeue()` exits with it (defined there, once).
from tpuq.job import EX_TEMPFAIL

__all__ = ["EX_TEMPFAIL", "Exit", "StartupFailure", "decode_wait_status", "from_returncode",
           "read_tail", "startup_failure", "tpu_busy_message"]


@dataclass(frozen=True)
class Exit:
    code: int | None
    signal: int | None

    @property
    def succeeded(self) -> bool:
        return self.code == 0 and self.signal is None

    @property
    def words(self) -> str:
        if self.signal is not None:
            return f"killed by signal {self.signal}{_signal_name(self.signal)}"
        if self.code == 0:
            return "exited 0"
        if self.code is not None:
            return f"exited with code {self.code}"
        return "ended with no exit status"


def _signal_name(signum: int) -> str:
    try:
        return f" ({signal.Signals(signum).name})"
    except ValueError:
        return ""


def decode_wait_status(status: int) -> Exit:
    """Decode an `os.waitpid` status of a process that has ended."""
    if os.WIFSIGNALED(status):
        return Exit(code=None, signal=os.WTERMSIG(status))
    if os.WIFEXITED(status):
        return Exit(code=os.WEXITSTATUS(status), signal=None)
    raise ValueError(f"wait status {status:#x} is not an exit (stopped or continued?)")


def from_returncode(rc: int) -> Exit:
    """Decode `Popen.returncode`: negative means killed by that signal."""
    if rc < 0:
        return Exit(code=None, signal=-rc)
    return Exit(code=rc, signal=None)


# One per "TPU busy" message in docs/tpu-facts.md. Device names are generalised (accel or
# vfio, any index) because the same failure names whichever chip was busy. A busy
# message alone is not "busy": the agent counts it as a host problem only when a scan
# then finds a holder of the chips (attempts/outcome.py).
_DEVICE = r"/dev/(?:accel\d+|vfio/\d+)"
BUSY_TPU_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        r"libtpu\.so already in use by another process",
        r"The TPU is already in use by process with pid \d+",
        r"The TPU is already in use by another process probably owned by another user",
        r"Internal error when accessing libtpu multi-process lockfile",
        rf"open\({_DEVICE}\): Device or resource busy",
        rf"open\({_DEVICE}\): Operation not permitted",
    )
)
# Lines that say the TPU runtime did not start, whatever the cause. JAX wraps every TPU
# backend failure in the first (jax `_src/xla_bridge.py`: a jax/libtpu mismatch, a wrong
# VM image, refused bounds, TPU_LOAD_LIBRARY=0); libtpu prints the second
# (marin-community/marin#2618). Neither says the TPU was busy.
STARTUP_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"Unable to initialize backend 'tpu'(?::\s*(.*))?"),
    re.compile(r"TPU initialization failed(?::\s*(.*))?"),
)
# A start-up failure is the fatal error, so it is among the last lines of the output; an
# early "Unable to initialize backend" that JAX only logged before falling back to the
# CPU is not why a job that ran on ended.
STARTUP_TAIL_LINES = 60
MAX_MESSAGE = 400

# What a person can do about a start-up failure, by what the runtime said. The first
# that matches the output wins; the last is the general advice.
HINTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"PJRT.*(?:version|API)|incompatible|version mismatch|Unexpected PJRT",
                re.I),
     "jax, jaxlib and libtpu versions do not match: install them together in the job's "
     "Python (pip install -U 'jax[tpu]')"),
    (re.compile(r"TPU_LOAD_LIBRARY|libtpu\.so.*(?:not found|cannot open)|No module named "
                r"'?libtpu", re.I),
     "the job's Python has no usable libtpu: pip install -U 'jax[tpu]' in the environment "
     "the job runs in"),
    (re.compile(r"bounds|TPU_VISIBLE_CHIPS|TPU_CHIPS_PER_PROCESS", re.I),
     "the runtime refused this chip subset's bounds: run the job on a whole host "
     "(no --chips) and tell the host's admin (docs/tpu-vm.md, shape probes)"),
    (re.compile(r"/dev/(?:accel|vfio)\S*: No such file", re.I),
     "the VM has TPU chips but no TPU device files: its image does not match its TPU "
     "generation (docs/tpu-vm.md, wrong image)"),
)
GENERAL_HINT = ("check that the job's Python has jax[tpu] installed and matching this VM's "
                "TPU (pip install -U 'jax[tpu]'); docs/tpu-vm.md lists the causes")


@dataclass(frozen=True)
class StartupFailure:
    """The TPU runtime did not start. `message`: the runtime's own words; `busy`: they
    say another process holds the TPU (a holder scan decides whether it does)."""

    message: str
    busy: bool
    hint: str


def tpu_busy_message(text: str) -> str | None:
    """The first line of `text` saying the TPU was busy, stripped, or None."""
    for line in text.splitlines():
        if any(p.search(line) for p in BUSY_TPU_PATTERNS):
            return line.strip()[:MAX_MESSAGE]
    return None


def _startup_message(lines: list[str]) -> str | None:
    """The runtime's own words from the last start-up failure line, or None."""
    for line in reversed(lines):
        for p in STARTUP_PATTERNS:
            m = p.search(line)
            if m is not None:
                return (m.group(1) or line).strip()[:MAX_MESSAGE] or line.strip()
    return None


def startup_failure(text: str) -> StartupFailure | None:
    """Why the TPU runtime did not start, from the end of a job's output; None when the
    output does not say it failed to start (the job failed on its own)."""
    lines = text.splitlines()[-STARTUP_TAIL_LINES:]
    tail = "\n".join(lines)
    busy = tpu_busy_message(tail)
    message = busy or _startup_message(lines)
    if message is None:
        return None
    hint = next((h for p, h in HINTS if p.search(tail)), GENERAL_HINT)
    return StartupFailure(message, busy is not None, hint)


def read_tail(path: str, max_bytes: int = 65536) -> str:
    """The last `max_bytes` of a log, starting at a whole line; "" when unreadable."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - max_bytes)
            f.seek(start)
            data = f.read()
    except OSError:
        return ""
    if start > 0 and b"\n" in data:
        # Drop the cut first line so a half message is not misread.
        data = data.partition(b"\n")[2]
    return data.decode("utf-8", "replace")
