"""The caller's half of an interactive session (`tpuq run`): a pseudo-terminal whose slave
end the session runs on (handed to the host's agent), and the copy of bytes between
the caller's own terminal and its master end.

The caller's terminal is put in raw mode, so every key (Ctrl-C included) reaches the
session's terminal, whose own line discipline then does what a terminal does: echo,
line editing, SIGINT to the session's foreground processes. A window size change of the
caller's terminal is set on the session's (TIOCSWINSZ), which signals SIGWINCH there.

Stdlib only; signal handlers only record the signal, the copy loop acts.
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import struct
import termios
import tty
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

ENDED = "ended"  # the session's side closed: the job and its keeper are done with it
GONE = "gone"  # the caller's terminal went away (hangup, SIGTERM, its end of input)
EOF_KEY = b"\x04"  # what ends a session's input when ours is not a terminal


class Pty:
    """A pseudo-terminal for one session, set up like the caller's terminal: the same
    modes (erase key, ...) and the same window size."""

    def __init__(self, like: int = 0) -> None:
        self.master, self.slave = os.openpty()
        if os.isatty(like):
            try:
                termios.tcsetattr(self.slave, termios.TCSANOW, termios.tcgetattr(like))
            except termios.error:
                pass
            copy_size(like, self.master)

    def close_slave(self) -> None:
        """Once the agent has its copy: the session's end is then seen here (EIO)."""
        if self.slave >= 0:
            os.close(self.slave)
            self.slave = -1

    def close(self) -> None:
        self.close_slave()
        if self.master >= 0:
            os.close(self.master)
            self.master = -1


def window_size(fd: int) -> tuple[int, int] | None:
    """(rows, columns) of a terminal, or None."""
    try:
        rows, cols, _, _ = struct.unpack("4H", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
    except OSError:
        return None
    return rows, cols


def copy_size(src: int, dst: int) -> None:
    """The window size of terminal `src` set on `dst` (its foreground gets SIGWINCH)."""
    try:
        fcntl.ioctl(dst, termios.TIOCSWINSZ, fcntl.ioctl(src, termios.TIOCGWINSZ, b"\0" * 8))
    except OSError:
        pass


@contextmanager
def raw(fd: int) -> Iterator[None]:
    """The terminal `fd` in raw mode meanwhile (not a terminal: nothing to do). Input
    typed before stays: it is the session's first input."""
    if not os.isatty(fd):
        yield
        return
    before = termios.tcgetattr(fd)
    tty.setraw(fd, termios.TCSANOW)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, before)


@contextmanager
def signals_noted(*sigs: signal.Signals) -> Iterator[tuple[int, set[int]]]:
    """A pipe that wakes a select() when one of `sigs` arrives, and the set of those that
    did (the handlers only note them)."""
    seen: set[int] = set()
    r, w = os.pipe()
    for fd in (r, w):
        os.set_blocking(fd, False)
    old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    old = {s: signal.signal(s, lambda n, _f: seen.add(n)) for s in sigs}
    try:
        yield r, seen
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(old_fd)
        os.close(r)
        os.close(w)


def relay(master: int, stdin: int = 0, stdout: int = 1,
          ended: Callable[[], bool] = lambda: False, check_every_s: float = 2.0) -> str:
    """Copy bytes both ways until the session's side closes (ENDED) or the caller's
    terminal goes away (GONE). `ended` is asked after each `check_every_s` of quiet: a
    process that left the session's process session may hold its terminal open after
    the session ended."""
    # SIGINT from elsewhere than the keyboard (whose Ctrl-C is a byte here) is noted and
    # left alone: the session has its own Ctrl-C
    with signals_noted(signal.SIGWINCH, signal.SIGHUP, signal.SIGTERM, signal.SIGINT) as (
            wake, seen), raw(stdin):
        return _copy(master, stdin, stdout, wake, seen, ended, check_every_s)


def _copy(master: int, stdin: int, stdout: int, wake: int, seen: set[int],
          ended: Callable[[], bool], check_every_s: float) -> str:
    reading: list[int] = [master, stdin, wake]
    while True:
        try:
            ready, _, _ = select.select(reading, [], [], check_every_s)
        except InterruptedError:
            ready = []
        if not ready and not seen and ended():
            return ENDED
        if wake in ready:
            _drain(wake)
        if seen & {signal.SIGHUP, signal.SIGTERM}:
            return GONE
        if signal.SIGWINCH in seen:
            seen.discard(signal.SIGWINCH)
            copy_size(stdin, master)
        if master in ready:
            data = _read(master)
            if data == b"":
                return ENDED
            if data and not _write_all(stdout, data):
                return GONE
        if stdin in ready:
            data = _read(stdin)
            if data is None:
                continue
            if data:
                _write_all(master, data)
            elif os.isatty(stdin):
                return GONE  # a terminal that reads nothing has hung up
            else:  # piped input ended: the session reads end-of-file, output goes on
                _write_all(master, EOF_KEY)
                reading.remove(stdin)


def _read(fd: int) -> bytes | None:
    """What `fd` has; b"" once its other side closed (EIO on a pty master); None when
    nothing is there after all."""
    try:
        return os.read(fd, 65536)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return b""


def _write_all(fd: int, data: bytes) -> bool:
    view: Any = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        except OSError:
            return False
        view = view[n:]
    return True


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass
