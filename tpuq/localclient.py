"""The CLI's side of the agent's Unix socket (embedded deployment).

Import-light on purpose: `tpuq submit` through the socket must not load SQLAlchemy,
which alone costs ~200 ms, so a submit finishes in tens of milliseconds.
"""

from __future__ import annotations

import json
import socket
from typing import Any


class AgentUnavailable(OSError):
    pass


def call(path: str, request: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
    """One request, one reply. AgentUnavailable when no agent listens at `path`."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        try:
            s.connect(path)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            raise AgentUnavailable(str(e)) from None
        s.sendall(json.dumps(request).encode() + b"\n")
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    finally:
        s.close()
    if not chunks:
        raise AgentUnavailable("agent closed the connection without answering")
    reply: dict[str, Any] = json.loads(b"".join(chunks))
    return reply


def wake(path: str) -> bool:
    """Ring the local agent; False when none is running (it will poll the database)."""
    try:
        return bool(call(path, {"op": "wake"}, timeout=5.0).get("ok"))
    except (OSError, ValueError):
        return False
