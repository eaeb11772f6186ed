from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tpuq.agent.tpu.libtpu import clean_stale_lock, trim_tpu_logs

# Takes libtpu's kind of lock (lockf F_TLOCK) and holds it until stdin closes.
LOCK = (
    "import fcntl, os, sys\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
    "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
    "print('locked', flush=True)\n"
    "sys.stdin.read()\n"
)

Locker = Callable[[Path], subprocess.Popen[str]]


@pytest.fixture
def lock_holder() -> Iterator[Locker]:
    started: list[subprocess.Popen[str]] = []

    def start(path: Path) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", LOCK, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == "locked\n"
        return proc

    try:
        yield start
    finally:
        for proc in started:
            release(proc)


def release(proc: subprocess.Popen[str]) -> None:
    for stream in (proc.stdin, proc.stdout):
        if stream is not None and not stream.closed:
            stream.close()
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


def test_missing_lock_file_is_nothing_to_do(tmp_path: Path) -> None:
    assert clean_stale_lock(str(tmp_path / "libtpu_lockfile"), False, ()) == []


def test_nothing_removed_while_holders_alive(tmp_path: Path) -> None:
    lock = tmp_path / "libtpu_lockfile"
    lock.touch()
    assert clean_stale_lock(str(lock), holders_alive=True, extra_globs=()) == []
    assert lock.exists()


def test_stale_lock_without_holder_is_removed(tmp_path: Path) -> None:
    lock = tmp_path / "libtpu_lockfile"
    lock.touch()
    assert clean_stale_lock(str(lock), holders_alive=False, extra_globs=()) == [
        str(lock)
    ]
    assert not lock.exists()


def test_lock_held_by_live_process_is_kept(tmp_path: Path, lock_holder: Locker) -> None:
    lock = tmp_path / "libtpu_lockfile"
    holder = lock_holder(lock)
    inode = lock.stat().st_ino
    assert clean_stale_lock(str(lock), holders_alive=False, extra_globs=()) == []
    assert lock.stat().st_ino == inode
    release(holder)  # the kernel drops the lock with the process
    assert clean_stale_lock(str(lock), holders_alive=False, extra_globs=()) == [
        str(lock)
    ]


def test_per_uid_variants_removed_only_when_unlocked(
    tmp_path: Path, lock_holder: Locker
) -> None:
    main = tmp_path / "libtpu_lockfile"
    stale = tmp_path / "libtpu_lock_1000" / "libtpu_lockfile"
    held = tmp_path / "libtpu_lock_1001" / "libtpu_lockfile"
    for p in (main, stale, held):
        p.parent.mkdir(exist_ok=True)
        p.touch()
    lock_holder(held)
    removed = clean_stale_lock(
        str(main), False, (f"{tmp_path}/libtpu_lock_*/libtpu_lockfile",)
    )
    assert removed == [str(main), str(stale)]
    assert held.exists() and not stale.exists()


def test_lock_test_falls_back_to_read_only_for_foreign_files(
    tmp_path: Path, lock_holder: Locker, monkeypatch: pytest.MonkeyPatch
) -> None:
    held, stale = tmp_path / "held", tmp_path / "stale"
    stale.touch()
    lock_holder(held)
    real_open = os.open

    def open_as_other_user(path: str, flags: int, mode: int = 0o777) -> int:
        if flags & os.O_RDWR:
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", open_as_other_user)
    assert clean_stale_lock(str(held), False, ()) == []
    assert clean_stale_lock(str(stale), False, ()) == [str(stale)]


def test_symlinked_lock_file_is_not_followed_or_removed(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep")
    lock = tmp_path / "libtpu_lockfile"
    lock.symlink_to(target)
    assert clean_stale_lock(str(lock), False, ()) == []
    assert lock.is_symlink() and target.read_text() == "keep"


def _log(path: Path, size: int, age_s: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    t = time.time() - age_s
    os.utime(path, (t, t))
    return path


def test_trim_missing_dir_frees_nothing(tmp_path: Path) -> None:
    assert trim_tpu_logs(str(tmp_path / "tpu_logs")) == 0


def test_trim_deletes_files_older_than_max_age(tmp_path: Path) -> None:
    old = _log(tmp_path / "a" / "old.log", 10, age_s=8 * 86400)
    new = _log(tmp_path / "new.log", 20, age_s=60)
    assert trim_tpu_logs(str(tmp_path), keep_bytes=10**6, max_age_s=7 * 86400) == 10
    assert not old.exists() and new.exists()


def test_trim_deletes_oldest_beyond_byte_budget(tmp_path: Path) -> None:
    logs = [_log(tmp_path / f"tpu{i}.log", 100, age_s=100 - i) for i in range(5)]
    assert trim_tpu_logs(str(tmp_path), keep_bytes=250, max_age_s=86400) == 300
    assert [p.exists() for p in logs] == [False, False, False, True, True]


def test_trim_within_budget_keeps_everything(tmp_path: Path) -> None:
    logs = [_log(tmp_path / f"tpu{i}.log", 100, age_s=10) for i in range(3)]
    assert trim_tpu_logs(str(tmp_path), keep_bytes=300) == 0
    assert all(p.exists() for p in logs)


def test_trim_unlinks_nothing_outside_when_a_listed_dir_becomes_a_symlink(tmp_path: Path) -> None:
    """Jobs can write the log dir: a directory swapped for a symlink between the listing
    and the unlinking must not make the agent delete the same names elsewhere."""
    from tpuq.agent.tpu.libtpu import _log_files, _unlink_listed

    logs, outside = tmp_path / "tpu_logs", tmp_path / "etc"
    _log(logs / "sub" / "passwd", 10, age_s=8 * 86400)
    kept = _log(outside / "passwd", 10, age_s=8 * 86400)
    doomed = {(root, name): ino for _, _, root, name, ino in _log_files(str(logs))}
    assert doomed, "the old log was listed"
    (logs / "sub" / "passwd").unlink()
    (logs / "sub").rmdir()
    (logs / "sub").symlink_to(outside)
    assert _unlink_listed(str(logs), doomed) == 0
    assert kept.exists()


def test_shared_log_dir_is_the_agents_own_and_sticky(tmp_path: Path) -> None:
    from tpuq.agent.tpu.libtpu import share_log_dir

    d = tmp_path / "tpu_logs"
    share_log_dir(str(d))
    assert stat.S_IMODE(d.stat().st_mode) == 0o1777 and not d.is_symlink()
    share_log_dir(str(d))  # again: kept as it is
    assert stat.S_IMODE(d.stat().st_mode) == 0o1777


def test_a_symlink_where_the_log_dir_goes_is_moved_aside_untouched(tmp_path: Path) -> None:
    from tpuq.agent.tpu.libtpu import share_log_dir

    target = tmp_path / "etc"
    target.mkdir(mode=0o755)
    d = tmp_path / "tpu_logs"
    d.symlink_to(target)
    share_log_dir(str(d))
    assert d.is_dir() and not d.is_symlink()
    assert stat.S_IMODE(target.stat().st_mode) == 0o755, "the link's target was not opened up"
    assert [p.name.startswith("tpu_logs.moved-") for p in tmp_path.iterdir()
            if p.name != "tpu_logs" and p.name != "etc"] == [True]


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_another_users_log_dir_is_moved_aside_not_adopted(tmp_path: Path) -> None:
    from tpuq.agent.tpu.libtpu import share_log_dir

    d = tmp_path / "tpu_logs"
    d.mkdir()
    (d / "theirs.log").write_text("x")
    os.chown(d, 65534, 65534)
    share_log_dir(str(d))
    assert d.stat().st_uid == 0 and list(d.iterdir()) == []
    moved = [p for p in tmp_path.iterdir() if p.name.startswith("tpu_logs.moved-")]
    assert len(moved) == 1 and (moved[0] / "theirs.log").read_text() == "x"
