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
    extra_globs: tuple[str, ...] | None = None,
) -> list[str]:
    """Remove libtpu lock files nobody holds; the removed paths.

    `holders_alive` is the caller's device-file scan: while any holder lives nothing is
    touched, even an unlocked file, since the holder may be between open() and lockf().
    """
    if holders_alive:
        return []
    if extra_globs is None:  # the per-uid fallback newer libtpu uses beside the shared file
        extra_globs = (os.path.join(os.path.dirname(lockfile), "libtpu_lock_*", "libtpu_lockfile"),)
    candidates = [lockfile]
    for pattern in extra_globs:
        candidates.extend(sorted(glob.glob(pattern)))
    removed = []
    for path in dict.fromkeys(candidates):
        if _remove_if_unlocked(path):
            removed.append(path)
    return removed


def _log_files(log_dir: str) -> list[tuple[float, int, str, str, int]]:
    """(mtime, size, directory, name, inode) of every regular file, oldest first.

    os.fwalk never follows a symlink and checks each directory it enters is the one it
    listed, so a directory swapped for a link (log_dir is writable by jobs) cannot lead
    the agent out of log_dir.
    """
    files = []
    try:
        for root, _dirs, names, dfd in os.fwalk(log_dir):
            for name in names:
                try:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    files.append((st.st_mtime, st.st_size, root, name, st.st_ino))
    except FileNotFoundError:  # no log dir (yet): nothing to trim
        return []
    files.sort()
    return files


def _unlink_listed(log_dir: str, doomed: dict[tuple[str, str], int]) -> int:
    """Unlink the files `doomed` names ((directory, name) -> inode) if each is still
    that file, relative to a directory descriptor from os.fwalk; bytes freed."""
    freed = 0
    for root, _dirs, names, dfd in os.fwalk(log_dir):
        for name in names:
            ino = doomed.get((root, name))
            if ino is None:
                continue
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if st.st_ino == ino and stat.S_ISREG(st.st_mode):
                    os.unlink(name, dir_fd=dfd)
                    freed += st.st_size
            except OSError:
                continue
    return freed


def share_log_dir(log_dir: str) -> None:
    """Let every user's libtpu write its logs here (jobs run as their owners): a
    directory made by the first job's user would refuse everyone else's.

    It must be the agent's own, sticky and world-writable like /tmp, so nobody removes
    another's logs. Anything else found at that path (another user's directory, a
    symlink, a file) is moved aside, not adopted: its owner could otherwise swap what
    is inside while the agent works there.
    """
    for _ in range(3):
        try:
            os.mkdir(log_dir, 0o755)
        except FileExistsError:
            pass
        try:
            fd = os.open(log_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            fd = None  # a symlink, or not a directory
        if fd is not None:
            try:
                if os.fstat(fd).st_uid == os.geteuid():
                    os.fchmod(fd, 0o1777)
                    return
            finally:
                os.close(fd)
        os.rename(log_dir, f"{log_dir}.moved-{time.time_ns()}")
    raise OSError(f"cannot make {log_dir} a directory of the agent's own")


def trim_tpu_logs(
    log_dir: str,
    keep_bytes: int = 200 * 1024 * 1024,
    max_age_s: float = 7 * 86400,
) -> int:
    """Delete logs older than `max_age_s`, then the oldest beyond `keep_bytes`; bytes freed."""
    files = _log_files(log_dir)  # oldest first; a missing dir yields nothing
    cutoff = time.time() - max_age_s
    total = sum(f[1] for f in files)
    doomed: dict[tuple[str, str], int] = {}
    for mtime, size, root, name, ino in files:
        if mtime >= cutoff and total <= keep_bytes:
            break  # sorted by age: everything after this is newer and within budget
        doomed[(root, name)] = ino
        total -= size
    return _unlink_listed(log_dir, doomed) if doomed else 0
