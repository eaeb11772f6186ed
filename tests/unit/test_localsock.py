"""The agent's Unix socket: anyone on the VM can connect, so bad clients get an answer
and cannot hold it up."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tpuq import localclient
from tpuq.agent import localsock


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    path = str(tmp_path / "agent.sock")
    srv = localsock.LocalSocketServer(path, lambda req, uid: {"ok": True, "uid": uid,
                                                              "echo": req}).start()
    try:
        yield path
    finally:
        srv.close()


def raw_call(path: str, payload: bytes, shut: bool = True) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(path)
        try:
            s.sendall(payload)
            if shut:
                s.shutdown(socket.SHUT_WR)
        except BrokenPipeError:
            pass  # the agent stopped reading (and answered): the reply is still there
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return json.loads(data)


def test_a_request_is_answered_with_the_kernels_word_on_who_asked(server):
    reply = localclient.call(server, {"op": "ping"})
    assert reply == {"ok": True, "uid": os.getuid(), "echo": {"op": "ping"}}


def test_an_oversized_request_is_cut_off_and_the_agent_serves_on(server):
    try:  # the agent stops reading: the client sees the refusal, or a reset if its
        # unread bytes were still queued when the agent closed (AF_UNIX resets then)
        reply = raw_call(server, b" " * (localsock.MAX_REQUEST + 65536))
        assert reply["ok"] is False and "request over" in reply["error"]
    except ConnectionResetError:
        pass
    assert localclient.call(server, {"op": "ping"})["ok"] is True


def test_garbage_and_non_objects_get_an_error_reply(server):
    assert "bad request" in raw_call(server, b"{not json")["error"]
    assert "JSON object" in raw_call(server, b"[1, 2]")["error"]


def test_a_client_that_never_finishes_is_cut_off(server, monkeypatch):
    monkeypatch.setattr(localsock, "READ_TIMEOUT_S", 0.2)
    reply = raw_call(server, b'{"op": "pi', shut=False)  # never shuts down writing
    assert reply["ok"] is False and "timed out" in reply["error"]
