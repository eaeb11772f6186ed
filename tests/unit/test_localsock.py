"""The agent's Unix socket: anyone on the VM can connect, so bad clients get an answer
and cannot hold it up."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import wait_for
from tpuq import localclient, protocol
from tpuq.agent.local.server import MAX_REQUEST, LocalSocketServer


def echo(req: protocol.Request, uid: int) -> protocol.Reply:
    """Who asked (the kernel's word) and what, in a reply's fields."""
    return protocol.Pong(pid=uid, host=req.OP, deployment=req.deployment or "")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    path = str(tmp_path / "agent.sock")
    srv = LocalSocketServer(path, echo).start()
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
    reply = localclient.call(server, protocol.Ping(deployment="d"))
    assert reply == protocol.Pong(pid=os.getuid(), host="ping", deployment="d")


def test_an_oversized_request_is_read_to_its_end_and_refused_naming_the_limit(server):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(server)
        s.sendall(b" " * (4 * MAX_REQUEST))  # no broken pipe: the agent reads on
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    reply = json.loads(data)
    assert reply["reply"] == "refusal" and reply["kind"] == "bad_request"
    assert f"request over {MAX_REQUEST} bytes" in reply["error"]
    assert isinstance(localclient.call(server, protocol.Ping()), protocol.Pong)


def test_the_client_refuses_a_request_too_big_to_send(server):
    reply = localclient.call(server, protocol.Submit(spec={"x": "y" * protocol.MAX_MESSAGE}))
    assert isinstance(reply, protocol.Refusal) and reply.kind is protocol.Failure.REFUSED
    assert f"at most {protocol.MAX_MESSAGE} bytes" in reply.error


def test_a_reply_of_any_size_comes_whole(tmp_path):
    jobs = [{"id": i, "command": ["x" * 500]} for i in range(20_000)]  # ~10 MB

    def listing(req: protocol.Request, uid: int) -> protocol.Reply:
        return protocol.JobList(jobs=jobs, now=1.0)

    path = str(tmp_path / "agent.sock")
    srv = LocalSocketServer(path, listing).start()
    try:
        assert localclient.call(path, protocol.ListJobs()) == protocol.JobList(jobs=jobs,
                                                                               now=1.0)
    finally:
        srv.close()


def idle_clients(path: str, n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        out.append(s)
    return out


@pytest.mark.parametrize(("connections", "per_user", "says"), [
    (3, 8, "agent busy (3 connections), try again"),
    (64, 3, "agent busy (3 requests of yours already), try again"),
])
def test_with_every_slot_taken_the_next_client_is_told_busy(tmp_path, connections, per_user,
                                                             says):
    path = str(tmp_path / "agent.sock")
    srv = LocalSocketServer(path, echo, connections=connections,
                                      per_user=per_user).start()
    idle = idle_clients(path, 3)
    try:
        for _ in range(20):  # each is answered, none waits in the backlog
            reply = localclient.call(path, protocol.Ping(), timeout=5)
            assert reply == protocol.Refusal(kind=protocol.Failure.BUSY, error=says)
        # a refused client still sending gets the answer, not a reset
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(path)
            s.settimeout(10)
            s.sendall(b" " * 500_000)
            s.shutdown(socket.SHUT_WR)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        assert json.loads(data)["error"] == says
        for s in idle:  # the idle ones hang up: their slots are free again
            s.close()
        wait_for(lambda: isinstance(localclient.call(path, protocol.Ping()), protocol.Pong),
                 timeout=10, what="a free slot")
    finally:
        for s in idle:
            s.close()
        srv.close()


def test_garbage_and_non_objects_get_an_error_reply(server):
    assert "bad request" in raw_call(server, b"{not json")["error"]
    assert "JSON object" in raw_call(server, b"[1, 2]")["error"]


def test_a_client_that_never_finishes_is_cut_off(server, monkeypatch):
    monkeypatch.setattr("tpuq.agent.local.server.READ_TIMEOUT_S", 0.2)
    reply = raw_call(server, b'{"op": "pi', shut=False)  # never shuts down writing
    assert reply["kind"] == "bad_request" and "timed out" in reply["error"]
