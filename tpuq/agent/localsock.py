"""The agent's Unix socket: bytes in, typed requests to a handler, typed replies out.

One request per connection (tpuq/protocol.py). The peer's uid comes from SO_PEERCRED,
so on a VM shared by several people a job is owned by whoever really submitted it.
What a request does is the handler's business (agent/localapi.py).
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable

from tpuq import protocol
from tpuq.protocol import PROTOCOL, Failure, Refusal, Reply, Request

log = logging.getLogger("tpuq.agent")
Handler = Callable[[Request, int], Reply]
# a request that came with file descriptors (a session's terminal): the handler keeps
# or closes each of them
FdHandler = Callable[[Request, int, list[int]], Reply]
# Anyone on the VM may connect: a request must come whole, soon (a deadline for all of
# it, not per read) and small; one user gets only so many answered at once (more are
# refused at once as busy), everyone together a few more (the rest wait in the backlog).
MAX_REQUEST = protocol.MAX_MESSAGE
READ_TIMEOUT_S = 5.0
MAX_CONCURRENT = 64
MAX_PER_UID = 8
MAX_FDS = 1  # descriptors one request may carry (a session's terminal)
# A reply never raises SIGPIPE, whatever the process's disposition: a client that hung
# up must cost nothing but its own answer.
_SEND_FLAGS = socket.MSG_NOSIGNAL


def peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


class LocalSocketServer:
    def __init__(self, path: str, handler: Handler, with_fds: FdHandler | None = None) -> None:
        self.path = path
        self.handler = handler
        self.with_fds = with_fds
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._thread = threading.Thread(target=self._serve, name="localsock", daemon=True)
        self._closed = False
        self._slots = threading.BoundedSemaphore(MAX_CONCURRENT)
        self._lock = threading.Lock()
        self._per_uid: Counter[int] = Counter()

    def start(self) -> LocalSocketServer:
        if os.path.exists(self.path):
            os.unlink(self.path)  # the caller checked no live agent answers on it
        self._sock.bind(self.path)
        os.chmod(self.path, 0o666)  # anyone on the VM may submit; ownership comes from SO_PEERCRED
        self._sock.listen(64)
        self._thread.start()
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
            self._slots.acquire()
            try:
                conn, _ = self._sock.accept()
            except OSError:
                self._slots.release()
                return
            try:
                uid = peer_uid(conn)
            except OSError:  # gone already
                conn.close()
                self._slots.release()
                continue
            with self._lock:
                busy = self._per_uid[uid] >= MAX_PER_UID
                if not busy:
                    self._per_uid[uid] += 1
            if busy:
                self._slots.release()
                _refuse_busy(conn, uid)
                continue
            threading.Thread(target=self._answer, args=(conn, uid), daemon=True).start()

    def _answer(self, conn: socket.socket, uid: int) -> None:
        try:
            with conn:
                reply, version = self._reply(conn, uid)
                try:
                    conn.settimeout(READ_TIMEOUT_S)
                    conn.sendall(protocol.encode(reply, version), _SEND_FLAGS)
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
            _close(fds)
            return Refusal(kind=Failure.BAD_REQUEST, error=str(e)), min(e.version, PROTOCOL)
        except (OSError, ValueError) as e:  # slow, oversized or garbled: the client's doing
            _close(fds)
            return Refusal(kind=Failure.BAD_REQUEST, error=f"bad request: {e}"), PROTOCOL
        try:
            if isinstance(request, protocol.AttachTerminal) and self.with_fds is not None:
                return self.with_fds(request, uid, fds), PROTOCOL
            _close(fds)  # nothing else takes descriptors
            return self.handler(request, uid), PROTOCOL
        except Exception as e:  # noqa: BLE001 - answer every request, log the bug
            log.exception("local request failed")
            return Refusal(kind=Failure.AGENT_ERROR, error=f"agent error: {e}"), PROTOCOL


def _read_request(conn: socket.socket, deadline: float, fds: list[int]) -> bytes:
    """The whole of what the client sends before it shuts down writing, by `deadline`;
    descriptors sent with it (SCM_RIGHTS, at most MAX_FDS: the kernel closes the rest)
    are added to `fds`."""
    raw = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"timed out: the request was not whole within {READ_TIMEOUT_S:g}s")
        conn.settimeout(left)
        chunk, got, _, _ = socket.recv_fds(conn, 65536, MAX_FDS)
        for fd in got:  # one sent in each piece must not pile up: keep the first alone
            if len(fds) < MAX_FDS:
                fds.append(fd)
            else:
                os.close(fd)
        if not chunk:
            return raw
        raw += chunk
        if len(raw) > MAX_REQUEST:
            raise ValueError(f"request over {MAX_REQUEST} bytes")


def _close(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()


def _refuse_busy(conn: socket.socket, uid: int) -> None:
    """Too many requests of this user in flight: say so without waiting on the client."""
    with conn:
        reply = Refusal(kind=Failure.BUSY, error=f"the agent is answering {MAX_PER_UID} "
                        "requests of yours already; try again")
        try:
            conn.setblocking(False)
            conn.send(protocol.encode(reply), _SEND_FLAGS | socket.MSG_DONTWAIT)
        except OSError:
            pass
    log.warning("refused a request of uid %d: %d in flight", uid, MAX_PER_UID)
