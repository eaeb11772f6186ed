"""Per-chip flock files, held by the supervisor for the whole attempt.

The database's allocation rows decide who may use a chip; these locks make the host
itself refuse a second owner (another agent started by mistake, a hand-run script using
the same convention as JAX's CI).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Sequence

from tpuq.errors import Failure, TpuqError


class ChipBusy(TpuqError, RuntimeError):
    """Another process holds a lock on one of the chips."""

    KIND = Failure.CONFLICT


def lock_paths(lock_dir: str, chips: Sequence[int]) -> list[str]:
    return [os.path.join(lock_dir, f"chip{chip}.lock") for chip in chips]


class ChipLocks:
    """Held by the attempt's keeper for its whole life (keeper/process.py), so an agent that dies
    does not free the chips of a job that still runs."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = list(paths)
        self._fds: list[int] = []

    def acquire(self) -> None:
        """Lock every chip or none; ChipBusy names the chip someone else holds."""
        try:
            for path in self.paths:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o666)
                self._fds.append(fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise ChipBusy(f"{os.path.basename(path)} is locked by another process "
                                   f"({path})") from None
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)  # closing drops the flock
        self._fds.clear()
