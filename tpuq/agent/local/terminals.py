"""The terminals of interactive sessions (`tpuq run`), from their caller to their start.

The caller opens a pseudo-terminal, keeps its master end and hands the agent the slave
end over the agent's socket (SCM_RIGHTS, with an AttachTerminal request). The agent
keeps it here, by job, until the session's attempt starts on this host: its supervisor
takes it and gives it to the keeper, which makes it the job's controlling terminal. The
job is still the agent's in every other respect (chips, lease, time limit, notices,
accounting); only its stdin, stdout and stderr are the caller's.

Anyone on the VM may connect to the socket, so what is kept is bounded: one terminal per
session, a few per person, and a terminal whose session ended or went to another host
is closed at the next attach.
"""

from __future__ import annotations

import os
import stat
import threading
import time

MAX_PER_UID = 4
MAX_KEPT = 64


class Refused(Exception):
    """Why a terminal is not kept (one line for the caller)."""


def check_terminal(fd: int) -> None:
    """Refused unless `fd` is a terminal (a character device that is a tty)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError as e:
        raise Refused(f"the terminal handed over cannot be read: {e}") from None
    if not stat.S_ISCHR(mode) or not os.isatty(fd):
        raise Refused("what was handed over is not a terminal")


class Terminals:
    """Slave ends of session terminals by job id, until their attempt takes them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._kept: dict[int, tuple[int, int, float]] = {}  # job -> (fd, uid, kept at)

    def offer(self, job_id: int, fd: int, uid: int) -> None:
        """Keep `fd` (ours from now on, closed when refused) for `job_id`."""
        with self._cond:
            why = None
            if job_id in self._kept:
                why = f"job {job_id} has its terminal already"
            elif sum(1 for _, u, _ in self._kept.values() if u == uid) >= MAX_PER_UID:
                why = f"{MAX_PER_UID} sessions of yours wait for their start here already"
            elif len(self._kept) >= MAX_KEPT:
                why = "too many sessions wait for their start on this host"
            if why is not None:
                os.close(fd)
                raise Refused(why)
            self._kept[job_id] = (fd, uid, time.monotonic())
            self._cond.notify_all()

    def take(self, job_id: int, timeout: float) -> int | None:
        """The terminal of `job_id` (the caller's to close), waiting up to `timeout`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while job_id not in self._kept:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
            return self._kept.pop(job_id)[0]

    def waiting(self) -> list[int]:
        """The jobs whose terminal is kept here."""
        with self._cond:
            return list(self._kept)

    def drop(self, job_id: int) -> None:
        """Close the terminal of a session that will not start here."""
        with self._cond:
            kept = self._kept.pop(job_id, None)
        if kept is not None:
            os.close(kept[0])
