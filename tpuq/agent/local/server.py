"""The agent's Unix socket: bytes in, typed requests to a handler, typed replies out.

One request per connection (tpuq/protocol.py). The peer's uid comes from SO_PEERCRED,
so on a VM shared by several people a job is owned by whoever really submitted it.
What a request does is the handler's business (agent/local/api.py).
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import struct
import threading
import time
from collections import Counter, deque
from collections.abc import Callable

from tpuq import framing, protocol
from tpuq.protocol import PROTOCOL, Failure, Refusal, Reply, Request

log = logging.getLogger("tpuq.agent")
Handler = Callable[[Request, int], Reply]
# a request that came with file descriptors (a session's terminal): the handler keeps
# or closes each of them
FdHandler = Callable[[Request, int, list[int]], Reply]
# Anyone on the VM may connect: a request must come whole, soon (a deadline for all of
# it, not per read) and small; one user gets only so many answered at once, everyone
# together MAX_CONCURRENT. Every connection is accepted at once: one over a limit is
# answered "busy" (never left in the backlog, where a full one reads as "no agent").
MAX_REQUEST = protocol.MAX_MESSAGE
READ_TIMEOUT_S = 5.0
WRITE_TIMEOUT_S = 30.0  # for each frame of a reply: a client reads while it decodes
MAX_CONCURRENT = 64
MAX_PER_UID = 8
MAX_FDS = 1  # descriptors one request may carry (a session's terminal)
REFUSE_DRAIN_S = 1.0  # how long a refused client may finish sending before it is closed
MAX_REFUSING = 256  # refused connections draining at once; the oldest is closed first
# A reply never raises SIGPIPE, whatever the process's disposition: a client that hung
# up must cost nothing but its own answer.
_SEND_FLAGS = socket.MSG_NOSIGNAL


def peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


class LocalSocketServer:
    """`connections`: requests answered at once (TPUQ_AGENT_CONNECTIONS); `per_user`:
    of them, one user's (TPUQ_AGENT_CONNECTIONS_PER_USER); `with_fds`: the handler of a
    request that came with file descriptors (a session's terminal)."""

    def __init__(self, path: str, handler: Handler, with_fds: FdHandler | None = None, *,
                 connections: int = MAX_CONCURRENT, per_user: int = MAX_PER_UID) -> None:
        self.path = path
        self.handler = handler
        self.with_fds = with_fds
        self.connections = max(1, connections)
        self.per_user = max(1, per_user)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._thread = threading.Thread(target=self._serve, name="localsock", daemon=True)
        self._closed = False
        self._slots = threading.BoundedSemaphore(self.connections)
        self._lock = threading.Lock()
        self._per_uid: Counter[int] = Counter()
        self._refuser = _Refuser()

    def start(self) -> LocalSocketServer:
        if os.path.exists(self.path):
            os.unlink(self.path)  # the caller checked no live agent answers on it
        self._sock.bind(self.path)
        os.chmod(self.path, 0o666)  # anyone on the VM may submit; ownership comes from SO_PEERCRED
        self._sock.listen(64)
        self._thread.start()
        self._refuser.start()
        return self

    def close(self) -> None:
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            try:
                uid = peer_uid(conn)
            except OSError:  # gone already
                conn.close()
                continue
            if not self._slots.acquire(blocking=False):
                log.warning("refused a request of uid %d: %d connections open", uid,
                            self.connections)
                self._refuser.refuse(conn, f"agent busy ({self.connections} connections), "
                                           "try again")
                continue
            with self._lock:
                busy = self._per_uid[uid] >= self.per_user
                if not busy:
                    self._per_uid[uid] += 1
            if busy:
                self._slots.release()
                log.warning("refused a request of uid %d: %d in flight", uid, self.per_user)
                self._refuser.refuse(conn, f"agent busy ({self.per_user} requests of yours "
                                           "already), try again")
                continue
            threading.Thread(target=self._answer, args=(conn, uid), daemon=True).start()

    def _answer(self, conn: socket.socket, uid: int) -> None:
        try:
            with conn:
                reply, version = self._reply(conn, uid)
                try:
                    for frame in _frames(reply, version):
                        conn.settimeout(WRITE_TIMEOUT_S)
                        conn.sendall(frame, _SEND_FLAGS)
                except OSError:
                    pass  # the client hung up or stopped reading: its loss alone
        finally:
            with self._lock:
                self._per_uid[uid] -= 1
                if not self._per_uid[uid]:
                    del self._per_uid[uid]
            self._slots.release()

    def _reply(self, conn: socket.socket, uid: int) -> tuple[Reply, int]:
        """The reply, and the protocol to write it in (the client's, for a refusal of
        its version: a client from before versions reads no "v")."""
        fds: list[int] = []
        try:
            raw = _read_request(conn, time.monotonic() + READ_TIMEOUT_S, fds)
            request = protocol.decode_request(raw)
        except protocol.SkewError as e:
            _close_fds(fds)
            return Refusal(kind=Failure.BAD_REQUEST, error=str(e)), min(e.version, PROTOCOL)
        except (OSError, ValueError) as e:  # slow, oversized or garbled: the client's doing
            _close_fds(fds)
            return Refusal(kind=Failure.BAD_REQUEST, error=f"bad request: {e}"), PROTOCOL
        try:
            if isinstance(request, protocol.AttachTerminal) and self.with_fds is not None:
                return self.with_fds(request, uid, fds), PROTOCOL
            _close_fds(fds)  # nothing else takes descriptors
            return self.handler(request, uid), PROTOCOL
        except Exception as e:  # noqa: BLE001 - answer every request, log the bug
            log.exception("local request failed")
            return Refusal(kind=Failure.AGENT_ERROR, error=f"agent error: {e}"), PROTOCOL


def _frames(reply: Reply, version: int) -> list[bytes]:
    try:
        return list(framing.frames(reply, version))
    except Exception as e:  # noqa: BLE001 - an item no frame holds: a bug, said as one
        log.exception("a %s reply cannot be sent", reply.NAME)
        return list(framing.frames(Refusal(kind=Failure.AGENT_ERROR, error=f"agent error: {e}"),
                                   version))


def _read_request(conn: socket.socket, deadline: float, fds: list[int]) -> bytes:
    """The whole of what the client sends before it shuts down writing, by `deadline`;
    descriptors sent with it (SCM_RIGHTS, at most MAX_FDS: the kernel closes the rest)
    are added to `fds`. An oversized request is read to its end (or the deadline) and
    dropped, so that the client, still sending, gets the refusal rather than a broken
    pipe."""
    raw = b""
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            if size > MAX_REQUEST:
                break
            raise TimeoutError(f"timed out: the request was not whole within {READ_TIMEOUT_S:g}s")
        conn.settimeout(left)
        chunk, got, _, _ = socket.recv_fds(conn, 65536, MAX_FDS)
        for fd in got:  # one sent in each piece must not pile up: keep the first alone
            if len(fds) < MAX_FDS:
                fds.append(fd)
            else:
                os.close(fd)
        if not chunk:
            break
        size += len(chunk)
        if size <= MAX_REQUEST:
            raw += chunk
    if size > MAX_REQUEST:
        raise ValueError(f"request over {MAX_REQUEST} bytes, the most one request may be")
    return raw


def _close_fds(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()


class _Refuser:
    """Answers connections over a limit: the refusal at once, then what the client still
    sends is read and dropped (for up to REFUSE_DRAIN_S) before closing, because closing
    on unread bytes resets the connection and the client would never see the answer.
    One thread for all of them, so a flood of refusals costs no thread each."""

    def __init__(self) -> None:
        self._new: deque[tuple[socket.socket, str]] = deque()
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._run, name="localsock-refuse", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def refuse(self, conn: socket.socket, error: str) -> None:
        self._new.append((conn, error))
        try:
            self._wake_w.send(b"x", socket.MSG_DONTWAIT)
        except OSError:
            pass  # already rung

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ)
        open_: dict[socket.socket, float] = {}  # in arrival order: the oldest first
        while True:
            try:
                self._turn(sel, open_)
            except Exception:  # noqa: BLE001 - a bug here must not leave clients unanswered
                log.exception("refusing connections failed")
                for conn in list(open_):
                    _close(sel, open_, conn)

    def _turn(self, sel: selectors.BaseSelector, open_: dict[socket.socket, float]) -> None:
        """Answer the new ones; read what the others send; close the finished or late."""
        while self._new:
            conn, error = self._new.popleft()
            _send_refusal(conn, error)
            if len(open_) >= MAX_REFUSING:
                oldest = next(iter(open_))
                _close(sel, open_, oldest)
            open_[conn] = time.monotonic() + REFUSE_DRAIN_S
            sel.register(conn, selectors.EVENT_READ)
        timeout = min(open_.values(), default=time.monotonic() + 60) - time.monotonic()
        for key, _ in sel.select(max(0.0, timeout)):
            if key.fileobj is self._wake_r:
                try:
                    self._wake_r.recv(4096)
                except OSError:
                    pass
                continue
            conn = key.fileobj  # type: ignore[assignment]
            try:
                more = conn.recv(65536)
            except OSError:
                more = b""
            if not more:
                _close(sel, open_, conn)
        now = time.monotonic()
        for conn in [c for c, d in open_.items() if d <= now]:
            _close(sel, open_, conn)


def _send_refusal(conn: socket.socket, error: str) -> None:
    try:
        conn.setblocking(False)
        conn.send(protocol.encode(Refusal(kind=Failure.BUSY, error=error)),
                  _SEND_FLAGS | socket.MSG_DONTWAIT)
        conn.shutdown(socket.SHUT_WR)  # the client sees the end of the answer at once
    except OSError:
        pass


def _close(sel: selectors.BaseSelector, open_: dict[socket.socket, float],
           conn: socket.socket) -> None:
    sel.unregister(conn)
    del open_[conn]
    conn.close()
