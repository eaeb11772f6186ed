"""The agent's Unix socket: the embedded deployment's doorbell and fast submit path.

One JSON request per connection. The peer's uid comes from SO_PEERCRED, so on a VM
shared by several people a job is owned by whoever really submitted it.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("tpuq.agent")
Handler = Callable[[dict[str, Any], int], dict[str, Any]]
# Anyone on the VM may connect: a request must come whole, soon, and small, and only so
# many are answered at once (the rest wait in the listen backlog).
MAX_REQUEST = 1024 * 1024
READ_TIMEOUT_S = 5.0
MAX_CONCURRENT = 32


def peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


class LocalSocketServer:
    def __init__(self, path: str, handler: Handler) -> None:
        self.path = path
        self.handler = handler
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._thread = threading.Thread(target=self._serve, name="localsock", daemon=True)
        self._closed = False
        self._slots = threading.BoundedSemaphore(MAX_CONCURRENT)

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
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        try:
            with conn:
                conn.settimeout(READ_TIMEOUT_S)
                reply = self._reply(conn)
                try:
                    conn.sendall(json.dumps(reply).encode())
                except OSError:
                    pass
        finally:
            self._slots.release()

    def _reply(self, conn: socket.socket) -> dict[str, Any]:
        try:
            raw = _read_request(conn)
        except (OSError, ValueError) as e:  # slow, oversized or garbled: the client's doing
            return {"ok": False, "error": f"bad request: {e}"}
        try:
            return self.handler(raw, peer_uid(conn))
        except Exception as e:  # noqa: BLE001 - answer every request, log the bug
            log.exception("local request failed")
            return {"ok": False, "error": f"agent error: {e}"}


def _read_request(conn: socket.socket) -> dict[str, Any]:
    """One JSON object, the whole of what the client sends before it shuts down writing."""
    raw = b""
    while chunk := conn.recv(65536):
        raw += chunk
        if len(raw) > MAX_REQUEST:
            raise ValueError(f"request over {MAX_REQUEST} bytes")
    req = json.loads(raw)
    if not isinstance(req, dict):
        raise ValueError("a request is a JSON object")
    return req
