from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tpuq.agent.tpu import holders
from tpuq.agent.tpu.devices import discover_chips, host_device_paths
from tpuq.agent.tpu.holders import (
    ProcInfo,
    describe,
    find_attempt_processes,
    find_holders,
    is_same_process,
    kill_and_wait,
    proc_info,
    proc_start_ticks,
)

# Opens every path given, says so, then waits for stdin to close.
HOLD = (
    "import sys\n"
    "files = [open(p) for p in sys.argv[1:]]\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
)

# Starts a holder in its own session, prints its pid and exits: the holder is then
# not our child, like an orphan left by an earlier agent. It inherits our stdin.
ORPHAN = (
    "import subprocess, sys\n"
    "p = subprocess.Popen([sys.executable, '-c', sys.argv[1]] + sys.argv[2:],\n"
    "                     stdout=subprocess.PIPE, start_new_session=True, text=True)\n"
    "assert p.stdout.readline() == 'ready\\n'\n"
    "print(p.pid, flush=True)\n"
)

Spawn = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    started: list[subprocess.Popen[str]] = []

    def start(*paths: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, *paths],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        return proc

    try:
        yield start
    finally:
        for proc in started:
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()  # EOF on stdin ends a holder even if kill is patched
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)


def _devices(tmp_path: Path, n: int = 4) -> list[str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        p = tmp_path / f"accel{i}"
        p.touch()
        paths.append(str(p))
    return paths


def test_find_holders_finds_child_holding_a_device(
    tmp_path: Path, spawn: Spawn
) -> None:
    devices = _devices(tmp_path)
    child = spawn(devices[2])
    found = find_holders(host_device_paths(discover_chips(f"{tmp_path}/accel*")))
    assert [h.pid for h in found] == [child.pid]
    assert found[0].start_ticks == proc_start_ticks(child.pid)
    assert found[0].uid == os.getuid()
    assert "sys.stdin.read()" in found[0].cmdline


def test_find_holders_in_vfio_dir_matched_by_parent_dir_glob(
    tmp_path: Path, spawn: Spawn
) -> None:
    vfio = tmp_path / "dev" / "vfio"
    vfio.mkdir(parents=True)
    for name in ("0", "1", "vfio"):
        (vfio / name).touch()
    child = spawn(str(vfio / "1"))
    spawn(str(vfio / "vfio"))  # the container file is not a chip
    chips = discover_chips(f"{tmp_path}/dev/accel*,{tmp_path}/dev/vfio/[0-9]*")
    assert [h.pid for h in find_holders(host_device_paths(chips))] == [child.pid]


def test_find_holders_matches_through_symlinked_dir(
    tmp_path: Path, spawn: Spawn
) -> None:
    devices = _devices(tmp_path / "real")
    (tmp_path / "dev").symlink_to(tmp_path / "real")
    child = spawn(devices[0])
    found = find_holders({str(tmp_path / "dev" / "accel0")})
    assert [h.pid for h in found] == [child.pid]


def test_find_holders_lists_each_holder_once(tmp_path: Path, spawn: Spawn) -> None:
    devices = _devices(tmp_path)
    child = spawn(*devices, devices[0])
    assert [h.pid for h in find_holders(set(devices))] == [child.pid]


def test_find_holders_skips_self_excluded_and_non_holders(
    tmp_path: Path, spawn: Spawn
) -> None:
    devices = _devices(tmp_path)
    other = tmp_path / "not-a-device"
    other.touch()
    spawn(str(other))
    excluded = spawn(devices[1])
    with open(devices[0]):
        assert find_holders(set(devices), exclude_pids={excluded.pid}) == []


def test_find_holders_reads_only_tpuq_markers_from_environ(
    tmp_path: Path, spawn: Spawn
) -> None:
    devices = _devices(tmp_path)
    env = {
        **os.environ,
        "TPUQ_JOB_ID": "7",
        "TPUQ_ATTEMPT": "2",
        "TPUQ_HOST": "tpu-a",
        "TPUQ_CHECKPOINT_DIR": "/ckpt",
        "SECRET": "x",
    }
    spawn(devices[0], env=env)
    (found,) = find_holders(set(devices))
    assert found.environ_marker == {
        "TPUQ_JOB_ID": "7",
        "TPUQ_ATTEMPT": "2",
        "TPUQ_HOST": "tpu-a",
        "TPUQ_CHECKPOINT_DIR": "/ckpt",
    }


def test_attempt_processes_are_found_by_host_and_state_dir_not_by_devices(
    spawn: Spawn,
) -> None:
    """Only this agent's attempts (host name and TPUQ_HOME's checkpoints) are found:
    another fake host, or another deployment's agent on the same machine, keeps its own."""
    def marked(host: str, ckpt: str) -> int:
        env = {**os.environ, "TPUQ_JOB_ID": "7", "TPUQ_ATTEMPT": "1", "TPUQ_HOST": host,
               "TPUQ_CHECKPOINT_DIR": ckpt}
        return spawn(env=env).pid

    ours = marked("tpu-a", "/srv/tpuq/checkpoints/7")
    marked("tpu-b", "/srv/tpuq/checkpoints/7")  # another host name
    marked("tpu-a", "/home/me/.local/share/tpuq/checkpoints/7")  # another deployment
    marked("tpu-a", "/srv/tpuq/checkpoints-old/7")  # a sibling, not inside
    found = find_attempt_processes("tpu-a", ["/srv/tpuq/checkpoints"])
    assert [p.pid for p in found] == [ours]


def _fake_proc(
    root: Path, pid: int, comm: str, start: int, fds: dict[str, str]
) -> None:
    d = root / str(pid)
    (d / "fd").mkdir(parents=True)
    rest = ["S", "1", str(pid), "4242"] + ["0"] * 15 + [str(start)] + ["0"] * 30
    (d / "stat").write_text(f"{pid} ({comm}) {' '.join(rest)}\n")
    (d / "status").write_text(f"Name:\t{comm}\nUid:\t{os.getuid()}\t0\t0\t0\n")
    (d / "cmdline").write_bytes(b"python\0train.py\0--steps\x0010\0")
    for fd, target in fds.items():
        (d / "fd" / fd).symlink_to(target)


def test_proc_start_ticks_survives_parentheses_and_spaces_in_comm(
    tmp_path: Path,
) -> None:
    _fake_proc(tmp_path, 4000001, "evil) 1 2 (x) y", 987654, {})
    assert proc_start_ticks(4000001, str(tmp_path)) == 987654


def test_proc_info_parses_fake_proc(tmp_path: Path) -> None:
    _fake_proc(tmp_path, 4000001, "a (b) c", 55, {})
    info = proc_info(4000001, str(tmp_path))
    assert info is not None
    assert (info.pid, info.start_ticks, info.session) == (4000001, 55, 4242)
    assert info.cmdline == "python train.py --steps 10"
    assert info.environ_marker == {}  # no environ file: unreadable counts as empty


def test_proc_info_and_ticks_none_for_vanished_process(tmp_path: Path) -> None:
    assert proc_info(4000001, str(tmp_path)) is None
    assert proc_start_ticks(4000001, str(tmp_path)) is None
    (tmp_path / "4000002").mkdir()
    (tmp_path / "4000002" / "stat").write_text("4000002 (trunc")
    assert proc_start_ticks(4000002, str(tmp_path)) is None


def test_find_holders_skips_unreadable_fds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    device = tmp_path / "accel0"
    device.touch()
    proc = tmp_path / "proc"
    _fake_proc(proc, 4000001, "denied", 1, {"3": str(device)})
    _fake_proc(proc, 4000002, "holder", 2, {"0": "/dev/null", "3": str(device)})
    real_readlink = os.readlink

    def readlink(path: str) -> str:
        if "/4000001/fd/" in str(path):
            raise PermissionError(errno.EACCES, "denied", path)
        return real_readlink(path)

    monkeypatch.setattr(os, "readlink", readlink)
    assert [h.pid for h in find_holders({str(device)}, proc=str(proc))] == [4000002]


def test_is_same_process_guards_against_pid_reuse(spawn: Spawn, tmp_path: Path) -> None:
    child = spawn(*_devices(tmp_path, 1))
    ticks = proc_start_ticks(child.pid)
    assert ticks is not None
    assert is_same_process(child.pid, ticks)
    assert not is_same_process(child.pid, ticks + 1)  # same pid, another process
    child.kill()
    child.wait()
    assert not is_same_process(child.pid, ticks)


def test_kill_and_wait_kills_verified_child(spawn: Spawn, tmp_path: Path) -> None:
    child = spawn(*_devices(tmp_path, 1))
    ticks = proc_start_ticks(child.pid)
    assert ticks is not None
    assert kill_and_wait([(child.pid, ticks)], timeout=10) == []
    assert child.wait(timeout=10) == -signal.SIGKILL  # left for its Popen to reap


def test_kill_and_wait_spares_a_process_with_other_start_time(
    spawn: Spawn, tmp_path: Path
) -> None:
    child = spawn(*_devices(tmp_path, 1))
    ticks = proc_start_ticks(child.pid)
    assert ticks is not None
    assert kill_and_wait([(child.pid, ticks - 1)], timeout=1) == []
    assert child.poll() is None


def test_kill_and_wait_without_pidfd_polls(
    spawn: Spawn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_pidfd(pid: int) -> int:
        raise OSError(errno.ENOSYS, "pidfd_open unavailable")

    monkeypatch.setattr(holders, "_pidfd_open", no_pidfd)
    child = spawn(*_devices(tmp_path, 1))
    ticks = proc_start_ticks(child.pid)
    assert ticks is not None
    assert kill_and_wait([(child.pid, ticks)], timeout=10) == []
    assert child.wait(timeout=10) == -signal.SIGKILL


def test_kill_and_wait_kills_non_child_orphan(tmp_path: Path) -> None:
    device = _devices(tmp_path, 1)[0]
    parent = subprocess.Popen(
        [sys.executable, "-c", ORPHAN, HOLD, device],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdin is not None and parent.stdout is not None
    try:
        pid = int(parent.stdout.read())
        parent.wait(timeout=60)
        ticks = proc_start_ticks(pid)
        assert ticks is not None
        assert parent.returncode == 0
        assert [h.pid for h in find_holders({device})] == [pid]
        assert kill_and_wait([(pid, ticks)], timeout=10) == []
        assert find_holders({device}) == []
    finally:
        # Closing the shared stdin ends the orphan too if an assertion failed early.
        parent.stdin.close()
        parent.stdout.close()
        if parent.poll() is None:
            parent.kill()
        parent.wait()


def test_describe() -> None:
    p = ProcInfo(1234, 1, 1000, "alice", 1234, "python train.py", {})
    assert describe(p) == "pid 1234 (alice): python train.py"


def test_kill_and_wait_reports_survivors_after_timeout(
    spawn: Spawn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def signal_lost(*args: object) -> None:
        return None  # as if the signal were blocked, e.g. a process in D state

    monkeypatch.setattr(signal, "pidfd_send_signal", signal_lost)
    monkeypatch.setattr(os, "kill", signal_lost)
    child = spawn(*_devices(tmp_path, 1))
    ticks = proc_start_ticks(child.pid)
    assert ticks is not None
    assert kill_and_wait([(child.pid, ticks)], timeout=0.2) == [child.pid]
    assert child.poll() is None


def test_a_holder_through_another_path_to_the_same_device_is_found_and_named(
        tmp_path: Path, spawn: Spawn) -> None:
    """A container opens its own device node: another path, the same device. A hard
    link stands in for it: the scan matches by the device, not by the path."""
    (device,) = _devices(tmp_path / "dev", 1)
    other = tmp_path / "container-dev" / "accel0"
    other.parent.mkdir()
    os.link(device, other)
    holder = spawn(str(other))
    found = find_holders({device})
    assert [p.pid for p in found] == [holder.pid]
    assert f"pid {holder.pid}" in holders.held_by(found) and str(other) in found[0].cmdline


def test_a_character_device_is_matched_by_major_and_minor(tmp_path: Path, spawn: Spawn) -> None:
    """What a container with `--device` does: its own node under its /dev, made with the
    host node's major and minor."""
    ours = tmp_path / "full"
    try:
        os.mknod(ours, 0o600 | stat.S_IFCHR, os.stat("/dev/full").st_rdev)
    except PermissionError:
        pytest.skip("mknod needs root")
    holder = spawn("/dev/full")
    assert holder.pid in {p.pid for p in find_holders({str(ours)})}


def test_the_old_images_tpu_runtime_service_is_named_with_its_fix(tmp_path: Path) -> None:
    """Old TPU VM images run the runtime as a service that holds the chips for good: the
    busy reason says to stop it (its cgroup, as /proc/<pid>/cgroup shows it)."""
    device = tmp_path / "accel0"
    device.touch()
    proc = tmp_path / "proc"
    _fake_proc(proc, 4000001, "tpu_driver", 1, {"3": str(device)})
    (proc / "4000001" / "cgroup").write_text("0::/system.slice/tpu-runtime.service\n")
    found = find_holders({str(device)}, proc=str(proc))
    assert [p.unit for p in found] == ["tpu-runtime.service"]
    assert "systemctl disable --now tpu-runtime" in holders.held_by(found)
    _fake_proc(proc, 4000002, "python", 2, {"3": str(device)})
    (proc / "4000002" / "cgroup").write_text("0::/user.slice/user-1000.slice/session-3.scope\n")
    other = [p for p in find_holders({str(device)}, proc=str(proc)) if p.pid == 4000002]
    assert "tpu-runtime" not in holders.held_by(other)
