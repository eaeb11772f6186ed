"""Who holds the TPU devices, and how to make sure they are gone.

Everything here reads `/proc` and must tolerate processes vanishing between two reads:
a race is reported as "not there", never raised.

A holder is matched by the device it has open, not by the path it opened: a container
started with `--device` or `--privileged` opens its own device node (another inode, the
same major/minor), and a hard link is another path to the same inode. So each open file
under `/dev/` is compared by `st_rdev` for a device node (by inode otherwise, which is
what the tests' fake devices are). Files elsewhere are compared by path only: a `stat`
of every open file would wait on a network filesystem that hangs (checkpoints on NFS).
"""

from __future__ import annotations

import os
import select
import signal
import stat
import time
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from tpuq import jobenv
from tpuq.users import name_of

# Non-pidfd fallback: short enough to notice an exit promptly, long enough not to spin.
_POLL_INTERVAL_S = 0.02


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    start_ticks: int
    uid: int
    user: str
    session: int
    cmdline: str
    environ_marker: dict[str, str]
    unit: str = ""  # the systemd unit it runs in (/proc/pid/cgroup), "" when none


# Old TPU VM images run the TPU runtime as a service of their own that holds the chips
# for good (the `tpu-runtime` systemd unit and its container); tpuq then names the fix.
OLD_RUNTIME_UNIT = "tpu-runtime.service"
OLD_RUNTIME_FIX = ("the TPU VM image's own tpu-runtime service holds the TPU (an old image): "
                   "stop it for good with `sudo systemctl disable --now tpu-runtime`")


def _stat_fields(pid: int, proc: str) -> list[str] | None:
    """Fields 3.. of /proc/pid/stat (state first), or None when the process is gone.

    comm (field 2) may contain spaces and ')' so the split is at the LAST ')'.
    """
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    _, sep, rest = raw.rpartition(")")
    fields = rest.split()
    return fields if sep and len(fields) >= 20 else None


def proc_start_ticks(pid: int, proc: str = "/proc") -> int | None:
    fields = _stat_fields(pid, proc)
    if fields is None:
        return None
    try:
        return int(fields[22 - 3])
    except ValueError:
        return None


PF_EXITING = 0x4  # include/linux/sched.h: the task has begun its exit (do_exit)


def exiting(pid: int, proc: str = "/proc") -> bool:
    """Every thread of the process has begun its exit: its status is set, a signal can
    no longer change it, and it is not yet a zombie (that comes last: releasing its
    memory and files can take milliseconds on a busy host). From the flags (field 9 of
    /proc/pid/task/TID/stat, proc(5)) of each thread: a process whose first thread
    ended while others run is not exiting."""
    try:
        tids = os.listdir(f"{proc}/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        fields = _stat_fields(int(tid), f"{proc}/{pid}/task") if tid.isdigit() else None
        try:
            if fields is None or not int(fields[9 - 3]) & PF_EXITING:
                return False
        except ValueError:
            return False
    return bool(tids)


def _proc_state(pid: int, proc: str) -> str | None:
    fields = _stat_fields(pid, proc)
    return fields[0] if fields else None


def _real_uid(pid: int, proc: str) -> int | None:
    try:
        with open(f"{proc}/{pid}/status", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cmdline(pid: int, proc: str) -> str:
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        raw = b""
    words = [w.decode("utf-8", "replace") for w in raw.split(b"\0") if w]
    if words:
        return " ".join(words)
    # Kernel threads and zombies have an empty cmdline; show comm like ps does.
    try:
        with open(f"{proc}/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f"[{f.read().strip()}]"
    except OSError:
        return "[?]"


def _environ_marker(pid: int, proc: str) -> dict[str, str]:
    # Another user's environ is unreadable unless we are root; that is expected.
    try:
        with open(f"{proc}/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    marker = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.decode("utf-8", "replace").partition("=")
        if sep and key in jobenv.MARKER_VARS:
            marker[key] = value
    return marker


def _unit(pid: int, proc: str) -> str:
    """The systemd unit of the process's cgroup (the last `*.service`/`*.scope` in its
    path), "" when there is none or it cannot be read."""
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    for line in lines:
        path = line.split(":", 2)[-1]
        units = [p for p in path.split("/") if p.endswith((".service", ".scope"))]
        if units:
            return units[-1]
    return ""


def proc_info(pid: int, proc: str = "/proc") -> ProcInfo | None:
    fields = _stat_fields(pid, proc)
    uid = _real_uid(pid, proc)
    if fields is None or uid is None:
        return None
    try:
        session, start_ticks = int(fields[6 - 3]), int(fields[22 - 3])
    except ValueError:
        return None
    info = ProcInfo(
        pid=pid,
        start_ticks=start_ticks,
        uid=uid,
        user=name_of(uid),
        session=session,
        cmdline=_cmdline(pid, proc),
        environ_marker=_environ_marker(pid, proc),
        unit=_unit(pid, proc),
    )
    # A pid recycled while we read would mix two processes' details.
    return info if proc_start_ticks(pid, proc) == start_ticks else None


def _pids(proc: str) -> list[int]:
    try:
        return sorted(int(name) for name in os.listdir(proc) if name.isdigit())
    except OSError:
        return []


Identity = tuple[int, ...]
# device files no TPU is opened as, whatever the namespace (terminals, /dev/null...)
_NEVER_A_TPU = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/pts/",
                "/dev/tty", "/dev/ptmx", "/dev/shm/", "/dev/console", "/dev/kmsg")


def device_identity(st: os.stat_result) -> Identity:
    """What makes two opens the same device: major/minor for a device node, whichever
    node was opened; the inode for anything else."""
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        return (0, st.st_rdev)
    return (1, st.st_dev, st.st_ino)


@dataclass(frozen=True)
class Devices:
    """The devices to look for: their paths (the cheap match) and identities."""

    paths: frozenset[str]
    ids: frozenset[Identity]
    # fake devices (regular files): compare every open file by inode, wherever it is
    anywhere: bool

    @classmethod
    def of(cls, paths: AbstractSet[str]) -> Devices:
        resolved = frozenset(os.path.realpath(p) for p in paths)
        ids = set()
        for p in resolved:
            try:
                ids.add(device_identity(os.stat(p)))
            except OSError:
                continue
        return cls(resolved, frozenset(ids), any(i[0] == 1 for i in ids))

    def held_through(self, fd_path: str, target: str) -> bool:
        if target in self.paths:
            return True
        if not target.startswith("/") or not (self.anywhere or target.startswith("/dev/")):
            return False  # a socket, a pipe, or a file outside /dev (see the module doc)
        if not self.anywhere and target.startswith(_NEVER_A_TPU):
            return False  # what every process has open: no stat for it
        try:
            return device_identity(os.stat(fd_path)) in self.ids
        except OSError:
            return False


def _holds_any(pid: int, devs: Devices, proc: str) -> bool:
    fd_dir = f"{proc}/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:  # vanished, or another user's process without privileges
        return False
    for fd in fds:
        fd_path = f"{fd_dir}/{fd}"
        try:
            target = os.readlink(fd_path)
        except OSError:
            continue
        if devs.held_through(fd_path, target):
            return True
    return False


def find_holders(
    paths: AbstractSet[str],
    proc: str = "/proc",
    exclude_pids: AbstractSet[int] = frozenset(),
) -> list[ProcInfo]:
    """Processes with any of the devices at `paths` open (through any path to them), by
    pid, each once (this process excluded)."""
    wanted = Devices.of(paths)
    skip = set(exclude_pids) | {os.getpid()}
    holders = []
    for pid in _pids(proc):
        if pid in skip or not _holds_any(pid, wanted, proc):
            continue
        info = proc_info(pid, proc)
        if info is not None:
            holders.append(info)
    return holders


def started_here(marker: dict[str, str], host: str, marks: Sequence[str]) -> bool:
    """The process belongs to an attempt that an agent for `host` with this state
    directory started: its environment says so (every child inherits it), and another
    deployment's agent on the same machine under the same host name is told apart by
    where its checkpoint directories lie (`marks`: under its TPUQ_HOME, or under the
    shared checkpoint root's directory of its database: workdirs.WorkDirs.marks)."""
    ckpt = marker.get(jobenv.CHECKPOINT_DIR, "")
    return (marker.get(jobenv.HOST) == host and jobenv.JOB_ID in marker
            and any(ckpt.startswith(m.rstrip("/") + "/") for m in marks))


def find_attempt_processes(host: str, marks: Sequence[str],
                           proc: str = "/proc") -> list[ProcInfo]:
    """Processes of attempts started here (started_here), whatever they hold.

    When an agent starts, each of them is an orphan: it supervises nothing yet. The
    device scan finds orphans that hold the TPU; this finds the rest, above all one whose
    pid never reached the database because the agent died right after spawning it.
    """
    found = []
    for pid in _pids(proc):
        if pid == os.getpid() or not started_here(_environ_marker(pid, proc), host, marks):
            continue
        info = proc_info(pid, proc)
        if info is not None:
            found.append(info)
    return found


def is_same_process(pid: int, start_ticks: int, proc: str = "/proc") -> bool:
    """True when `pid` is alive and is still the process that started at `start_ticks`."""
    return proc_start_ticks(pid, proc) == start_ticks


def _is_gone(pid: int, start_ticks: int) -> bool:
    # A zombie has already closed its files and dropped its locks; reaping it is up to
    # its parent (our Popen objects keep their own wait status), so dead counts as gone.
    return not is_same_process(pid, start_ticks) or _proc_state(pid, "/proc") == "Z"


def _pidfd_open(pid: int) -> int:
    return os.pidfd_open(pid)


def _kill_verified(pid: int, start_ticks: int) -> int | None:
    """SIGKILL `pid` if it is still the recorded process; its pidfd when one is open.

    With a pidfd opened before the start-time check, the signal cannot reach a process
    that reused the pid after the check.
    """
    try:
        pidfd: int | None = _pidfd_open(pid)
    except ProcessLookupError:
        return None
    except OSError:
        pidfd = None
    if not is_same_process(pid, start_ticks):
        if pidfd is not None:
            os.close(pidfd)
        return None
    try:
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    except PermissionError:
        pass  # reported as still alive by the wait below
    return pidfd


def _await_exits(pidfds: dict[int, int], deadline: float) -> None:
    """Block until every pidfd is readable (its process exited) or the deadline."""
    pending = dict(pidfds)
    while pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        ready, _, _ = select.select(list(pending.values()), [], [], remaining)
        for fd in ready:
            pending = {pid: f for pid, f in pending.items() if f != fd}


def kill_and_wait(pids_with_ticks: list[tuple[int, int]], timeout: float) -> list[int]:
    """SIGKILL each still-verified process and wait for it; pids alive after `timeout`."""
    deadline = time.monotonic() + timeout
    targets: dict[int, int] = {}
    pidfds: dict[int, int] = {}
    for pid, ticks in pids_with_ticks:
        if not is_same_process(pid, ticks):
            continue
        targets[pid] = ticks
        pidfd = _kill_verified(pid, ticks)
        if pidfd is not None:
            pidfds[pid] = pidfd
    try:
        _await_exits(pidfds, deadline)
    finally:
        for fd in pidfds.values():
            os.close(fd)
    alive = [pid for pid, ticks in targets.items() if not _is_gone(pid, ticks)]
    while alive and time.monotonic() < deadline:
        time.sleep(_POLL_INTERVAL_S)
        alive = [pid for pid in alive if not _is_gone(pid, targets[pid])]
    return alive


def describe(p: ProcInfo) -> str:
    return f"pid {p.pid} ({p.user}): {p.cmdline}"


def is_old_runtime(p: ProcInfo) -> bool:
    return p.unit == OLD_RUNTIME_UNIT or "tpu-runtime" in p.cmdline


def held_by(foreign: list[ProcInfo]) -> str:
    """Why a host takes no job: the processes tpuq did not start that hold its TPU (and,
    for the old images' runtime service, how to stop it)."""
    why = "TPU held by " + "; ".join(describe(p) for p in foreign)
    return f"{why}: {OLD_RUNTIME_FIX}" if any(map(is_old_runtime, foreign)) else why
