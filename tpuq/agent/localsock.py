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
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                raw = b""
                while chunk := conn.recv(65536):
                    raw += chunk
                reply = self.handler(json.loads(raw), peer_uid(conn))
            except Exception as e:  # noqa: BLE001 - answer every request, log the bug
                log.exception("local request failed")
                reply = {"ok": False, "error": f"agent error: {e}"}
            try:
                conn.sendall(json.dumps(reply).encode())
            except OSError:
                pass
