"""The agent's side of its keepers (keeper/process.py): start their pool's server
(keeper/pool.py), launch an attempt through it, and talk to a keeper over its socket
(also one of an earlier agent's life, to adopt it)."""

from __future__ import annotations

import logging
import os
import select
import socket
import subprocess
import sys
import time
from typing import Protocol

from tpuq.agent.keeper.messages import (
    Ended,
    FromKeeper,
    Launch,
    MessageError,
    Refused,
    ToKeeper,
    UnknownVersion,
    encode,
    from_keeper,
)
from tpuq.agent.keeper.process import SERVER, clock, keeper_socket, unix_call
from tpuq.errors import Failure, TpuqError

log = logging.getLogger("tpuq.agent")
START_TIMEOUT_S = 30.0

__all__ = ["KeeperGone", "KeeperLink", "KeeperServer", "Keepers", "clock"]


class KeeperGone(TpuqError, OSError):
    """The keeper's socket closed: it died (or was never there)."""

    KIND = Failure.UNAVAILABLE


class KeeperLink:
    """One connection to one keeper: messages (keeper/messages.py) each way."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = b""
        self._pending: list[FromKeeper] = []
        self._gone = False

    def fileno(self) -> int:
        return self.sock.fileno()

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    def ends_within(self, timeout: float) -> bool:
        """Whether the keeper says its job ended within `timeout` seconds (False at once
        when it closed its socket); the message stays pending for `events`."""
        deadline = time.monotonic() + timeout
        while True:
            self._pull()
            if any(isinstance(m, Ended) for m in self._pending):
                return True
            left = deadline - time.monotonic()
            if self._gone or left <= 0:
                return False
            select.select([self.sock], [], [], left)

    def send(self, msg: ToKeeper) -> bool:
        try:
            self.sock.sendall(encode(msg), socket.MSG_NOSIGNAL)
            return True
        except OSError:
            return False

    def _pull(self) -> None:
        """Read what has arrived, without blocking, into the pending messages."""
        if self._gone:
            return
        self.sock.setblocking(False)
        try:
            while True:
                try:
                    chunk = self.sock.recv(65536)
                except BlockingIOError:
                    break
                except OSError:
                    chunk = b""
                if not chunk:
                    self._gone = True
                    break
                self._buf += chunk
        finally:
            self.sock.setblocking(True)
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            try:
                msg = from_keeper(line)
            except UnknownVersion as e:
                log.warning("a keeper's message skipped: %s", e)
                continue
            except MessageError:
                continue
            self._pending.append(msg)

    def events(self) -> list[FromKeeper]:
        """What the keeper said since the last call (without blocking). KeeperGone once
        its socket closed and everything it said was taken."""
        self._pull()
        out, self._pending = self._pending, []
        if not out and self._gone:
            raise KeeperGone("the keeper closed its socket")
        return out

    def wait_event(self, timeout: float) -> FromKeeper:
        """The next thing the keeper says, waiting up to `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            self._pull()
            if self._pending:
                return self._pending.pop(0)
            if self._gone:
                raise KeeperGone("the keeper closed its socket")
            left = deadline - time.monotonic()
            if left <= 0:
                raise KeeperGone("the keeper did not answer")
            select.select([self.sock], [], [], left)

    def close(self) -> None:
        self.sock.close()


class Keepers(Protocol):
    """What a supervisor needs of the keeper server: launch an attempt under a keeper
    (KeeperServer; tests/state/test_supervisor.py answers with a fake keeper)."""

    run_dir: str

    def launch(self, launch: Launch, tty: int | None = None) -> tuple[KeeperLink, FromKeeper]:
        ...


class KeeperServer:
    """The process that forks keepers; started with the agent, stopped with it (the
    keepers it forked live on)."""

    def __init__(self, run_dir: str, lives: int | None = None) -> None:
        self.run_dir = run_dir
        self.lives = lives  # attempts a keeper keeps (keeper/pool.py's LIVES when None)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def path(self) -> str:
        return os.path.join(self.run_dir, SERVER)

    def start(self) -> KeeperServer:
        os.makedirs(self.run_dir, mode=0o700, exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tpuq.agent.keeper.pool", self.run_dir, str(os.getpid()),
             *(() if self.lives is None else (str(self.lives),))],
            stdin=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if self.proc.poll() is not None:
                raise RuntimeError(f"the keeper server exited with {self.proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError("the keeper server did not start")
            time.sleep(0.01)
        return self

    def _answers(self) -> bool:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(self.path)
            return True
        except OSError:
            return False
        finally:
            s.close()

    def launch(self, launch: Launch, tty: int | None = None) -> tuple[KeeperLink, FromKeeper]:
        """Start an attempt under a new keeper: the link to it, and what it said first
        ("started" with the job's pid, or "ended" when it could not start). A session's
        terminal `tty` goes with the launch (the caller still closes its own copy)."""
        if self.proc is None or self.proc.poll() is not None:
            log.warning("the keeper server is gone; starting it again")
            self.start()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(START_TIMEOUT_S)
        _connect_when_taken(s, self.path)
        line = encode(launch)
        if tty is None:
            s.sendall(line)
        else:  # the descriptor rides on the first bytes; the rest follows plainly
            sent = socket.send_fds(s, [line], [tty])
            s.sendall(line[sent:])
        link = KeeperLink(s)
        first = link.wait_event(START_TIMEOUT_S)
        if isinstance(first, Refused):
            link.close()
            raise RuntimeError(first.message)
        return link, first

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def _connect_when_taken(s: socket.socket, path: str) -> None:
    """Connect to the keepers' server; while its queue of launches is full (every idle
    keeper is taken and starting a job, and more launches wait than it holds: a Unix
    socket then refuses at once, EAGAIN), again, until one is taken or START_TIMEOUT_S."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            s.connect(path)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                s.close()
                raise RuntimeError(f"no keeper took a launch within {START_TIMEOUT_S:g}s "
                                   f"({path})") from None
            time.sleep(0.002)


def adopt(run_dir: str, job_id: int, attempt: int) -> tuple[KeeperLink, FromKeeper] | None:
    """Connect to the keeper of an attempt (an earlier agent's life left it running):
    the link and its status, or None when no keeper answers for it."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5.0)
    try:
        unix_call(s, keeper_socket(run_dir, job_id, attempt), "connect")
    except OSError:
        s.close()
        return None
    link = KeeperLink(s)
    try:
        return link, link.wait_event(5.0)
    except KeeperGone:
        link.close()
        return None


def live_keepers(run_dir: str) -> list[tuple[int, int]]:
    """(job, attempt) of every keeper socket in run_dir (live or left behind)."""
    found = []
    try:
        names = os.listdir(run_dir)
    except FileNotFoundError:
        return []
    for name in names:
        if name.startswith("keeper-") and name.endswith(".sock"):
            try:
                job, attempt = name[len("keeper-"):-len(".sock")].split("-")
                found.append((int(job), int(attempt)))
            except ValueError:
                continue
    return sorted(found)
