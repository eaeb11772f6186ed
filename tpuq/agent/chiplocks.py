"""Per-chip flock files, held by the supervisor for the whole attempt.

The database's allocation rows decide who may use a chip; these locks make the host
itself refuse a second owner (another agent started by mistake, a hand-run script using
the same convention as JAX's CI).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Sequence


class ChipBusy(RuntimeError):
    pass


class ChipLocks:
    def __init__(self, lock_dir: str, chips: Sequence[int]) -> None:
        self.lock_dir = lock_dir
        self.chips = list(chips)
        self._fds: list[int] = []

    def acquire(self) -> None:
        """Lock every chip or none; ChipBusy names the chip someone else holds."""
        os.makedirs(self.lock_dir, exist_ok=True)
        try:
            for chip in self.chips:
                path = os.path.join(self.lock_dir, f"chip{chip}.lock")
                fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o666)
                self._fds.append(fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise ChipBusy(f"chip {chip} is locked by another process ({path})") from None
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)  # closing drops the flock
        self._fds.clear()
