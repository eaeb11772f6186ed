"""Clean up what libtpu leaves behind: a stale lock file and an ever-growing log dir.

Call only after every holder of the TPU device files is confirmed dead: libtpu's lock is
a POSIX record lock on the file's inode, so unlinking a file a live process has locked
lets the next process create a new inode and lock that, and two processes share the TPU.
"""

from __future__ import annotations

import errno
import fcntl
import glob
import os
import stat
import time

DEFAULT_LOCKFILE = "/tmp/libtpu_lockfile"
PER_UID_LOCK_GLOBS = ("/tmp/libtpu_lock_*/libtpu_lockfile",)
DEFAULT_LOG_DIR = "/tmp/tpu_logs"


def _open_for_lock_test(path: str) -> tuple[int, int] | None:
    """(fd, lock op) able to detect libtpu's exclusive lock, or None if we cannot look.

    libtpu locks exclusively, so even a shared lock through a read-only descriptor
    conflicts with it: that is how another user's lock file can be tested. O_NOFOLLOW
    because these paths sit in world-writable /tmp and the agent may run as root.
    """
    flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for mode, op in ((os.O_RDWR, fcntl.LOCK_EX), (os.O_RDONLY, fcntl.LOCK_SH)):
        try:
            fd = os.open(path, mode | flags)
        except PermissionError:
            continue
        except OSError:  # gone, or a symlink planted in /tmp
            return None
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd, op
        os.close(fd)
        return None
    return None


def _remove_if_unlocked(path: str) -> bool:
    opened = _open_for_lock_test(path)
    if opened is None:
        return False
    fd, op = opened
    try:
        try:
            fcntl.lockf(fd, op | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EAGAIN):
                return False  # a live process holds libtpu's lock on this inode
            raise
        # Unlink while still holding the lock: a libtpu starting in this instant then
        # fails its F_TLOCK on the old inode instead of winning a lock we are deleting.
        try:
            os.unlink(path)
        except OSError:
            return False
        return True
    finally:
        os.close(fd)  # also releases our lock


def clean_stale_lock(
    lockfile: str,
    holders_alive: bool,
    extra_globs: tuple[str, ...] = PER_UID_LOCK_GLOBS,
) -> list[str]:
    """Remove libtpu lock files nobody holds; the removed paths.

    `holders_alive` is the caller's device-file scan: while any holder lives nothing is
    touched, even an unlocked file, since the holder may be between open() and lockf().
    """
    if holders_alive:
        return []
    candidates = [lockfile]
    for pattern in extra_globs:
        candidates.extend(sorted(glob.glob(pattern)))
    removed = []
    for path in dict.fromkeys(candidates):
        if _remove_if_unlocked(path):
            removed.append(path)
    return removed


def _log_files(log_dir: str) -> list[tuple[float, int, str]]:
    files = []
    for root, _dirs, names in os.walk(log_dir):
        for name in names:
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                files.append((st.st_mtime, st.st_size, path))
    files.sort()
    return files


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
    except OSError:
        return False
    return True


def share_log_dir(log_dir: str = DEFAULT_LOG_DIR) -> None:
    """Let every user's libtpu write its logs here (jobs run as their owners): a
    directory made by the first job's user would refuse everyone else's. Sticky, like
    /tmp, so nobody removes another's logs (the agent, as root, still trims them)."""
    os.makedirs(log_dir, exist_ok=True)
    os.chmod(log_dir, 0o1777)


def trim_tpu_logs(
    log_dir: str = DEFAULT_LOG_DIR,
    keep_bytes: int = 200 * 1024 * 1024,
    max_age_s: float = 7 * 86400,
) -> int:
    """Delete logs older than `max_age_s`, then the oldest beyond `keep_bytes`; bytes freed."""
    files = _log_files(log_dir)  # oldest first; a missing dir yields nothing
    cutoff = time.time() - max_age_s
    total = sum(size for _, size, _ in files)
    freed = 0
    for mtime, size, path in files:
        if mtime >= cutoff and total <= keep_bytes:
            break  # sorted by age: everything after this is newer and within budget
        if _unlink(path):
            freed += size
            total -= size
    return freed
