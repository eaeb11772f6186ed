"""Has anybody opened the chips' device files since the last scan found them free?

The /proc scan before a start (tpu/holders.py) reads every open file of every process: a
few milliseconds on a busy VM, paid again for every short job. inotify reports every
open of a watched device file (IN_OPEN) and every last close of an open file
(IN_CLOSE_*), whoever does it. So after a scan found nobody holding a chip, while each
open since has been matched by its close, nobody holds the chip now and the next start
can skip the scan. Anything else means scan: an open not yet closed, more closes than
opens (a holder the scan did not count), a lost event queue (IN_Q_OVERFLOW), a device
that went away, or no inotify at all.

Two limits, because inotify watches one device node and a process may open the chip
through another (a container's own node, a hard link: same device, other inode): a scan's
"free" is trusted for `trust_s` only, and not at all after an attempt ended saying the
TPU was busy (`distrust`). The scan itself matches holders by device (tpu/holders.py).
"""

from __future__ import annotations

import ctypes
import errno
import logging
import math
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable

log = logging.getLogger("tpuq.agent")

IN_CLOSE_WRITE, IN_CLOSE_NOWRITE, IN_OPEN = 0x08, 0x10, 0x20
IN_DELETE_SELF, IN_IGNORED, IN_Q_OVERFLOW = 0x400, 0x8000, 0x4000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)


class DeviceWatch:
    def __init__(self, paths: Iterable[str], trust_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._path_of: dict[int, str] = {}
        self._opened: dict[str, int] = {}  # opens minus closes since the scan
        self._clean: dict[str, float] = {}  # paths the last scan found free: when it began
        self._scan_at: dict[str, float] = {}
        self.trust_s = trust_s
        self._clock = clock
        self._fd = _inotify_init()
        if self._fd is None:
            return
        for path in sorted(set(paths)):
            wd = _libc().inotify_add_watch(self._fd, os.fsencode(path),
                                           IN_OPEN | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE
                                           | IN_DELETE_SELF)
            if wd < 0:
                log.info("cannot watch %s (%s): it is scanned before every start", path,
                         os.strerror(ctypes.get_errno()))
                continue
            self._path_of[wd] = path

    @property
    def active(self) -> bool:
        return bool(self._path_of)

    def quiet(self, paths: Iterable[str]) -> bool:
        """True when a scan found `paths` free less than `trust_s` ago and every open
        since has been closed."""
        with self._lock:
            self._drain()
            oldest = self._clock() - self.trust_s
            return all(self._clean.get(p, -math.inf) >= oldest and self._opened.get(p) == 0
                       for p in paths)

    def distrust(self) -> None:
        """Forget every "free": the next start scans (an attempt said the TPU was busy)."""
        with self._lock:
            self._clean.clear()

    def scan_starts(self, paths: Iterable[str]) -> None:
        """Call right before scanning: counting starts afresh from here."""
        with self._lock:
            self._drain()
            now = self._clock()
            for p in paths:
                self._opened[p] = 0
                self._clean.pop(p, None)
                self._scan_at[p] = now

    def scan_found_free(self, paths: Iterable[str]) -> None:
        """The scan that began at `scan_starts` found nobody holding `paths`."""
        with self._lock:
            watched = set(self._path_of.values())
            self._clean.update((p, self._scan_at.get(p, -math.inf)) for p in paths
                               if p in watched)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._path_of.clear()
            self._clean.clear()

    def _drain(self) -> None:
        if self._fd is None:
            return
        while True:
            try:
                data = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                return
            except OSError as e:
                log.warning("device watch failed (%s): scanning before every start", e)
                self._clean.clear()
                return
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, size = _EVENT.unpack_from(data, offset)
                offset += _EVENT.size + size
                self._event(wd, mask)

    def _event(self, wd: int, mask: int) -> None:
        if mask & IN_Q_OVERFLOW:
            self._clean.clear()  # events were lost: nothing is known any more
            return
        path = self._path_of.get(wd)
        if path is None:
            return
        if mask & (IN_DELETE_SELF | IN_IGNORED):
            self._clean.pop(path, None)
            self._path_of.pop(wd, None)
            return
        if mask & IN_OPEN:
            self._opened[path] = self._opened.get(path, 0) + 1
        if mask & (IN_CLOSE_WRITE | IN_CLOSE_NOWRITE):
            self._opened[path] = self._opened.get(path, 0) - 1
            if self._opened[path] < 0:  # a holder from before the scan: scan again
                self._clean.pop(path, None)


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def _inotify_init() -> int | None:
    try:
        fd = int(_libc().inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
    except (OSError, AttributeError):
        return None
    if fd < 0:
        err = ctypes.get_errno()
        log.info("no inotify (%s): device files are scanned before every start",
                 os.strerror(err) if err else errno.errorcode.get(err, "?"))
        return None
    return fd
