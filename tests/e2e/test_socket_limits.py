"""The agent's socket at scale, on both deployments, with a real agent: replies bigger
than a frame (the status of 3,000 tasks, the results of cancelling them), a request over
the limit refused in one line, a full agent answering "busy" rather than looking absent,
and an array of 20,000 tasks cancelled within the client's patience."""

from __future__ import annotations

import json
import socket
import time

from tests.harness import FakeHost, Stack
from tpuq import protocol


def _array(stack: Stack, n: int) -> list[int]:
    r = stack.tpuq("submit", "--json", "--hold", "--chips", "1", "--array", f"0-{n - 1}",
                   "--", "/bin/true", cwd="/")
    tasks = json.loads(r.stdout)["tasks"]
    assert len(tasks) == n
    return tasks


def _states(stack: Stack, ids: list[int]) -> dict[str, int]:
    from sqlalchemy import func, select

    from tpuq.state.models import Job

    with stack.db.read() as s:
        rows = s.execute(select(Job.state, func.count()).where(Job.id.in_(ids))
                         .group_by(Job.state)).all()
    return {st: n for st, n in rows}


def test_status_and_cancel_mine_of_3000_tasks_through_the_agent(stack, tmp_path):
    """A reply of ~3 MB (well past one 1 MiB frame): `status`, `status --json` and
    `cancel --mine` work for the submitter and for anyone else, through the agent and
    without one."""
    stack.start_agent(FakeHost(tmp_path / "host", chips=8))
    tasks = _array(stack, 3000)
    listed = json.loads(stack.tpuq("status", "--json").stdout)
    assert len(listed) > protocol.MAX_MESSAGE // 1000  # so the reply did not fit a frame
    assert {j["id"] for j in listed} >= set(tasks)
    other = json.loads(stack.tpuq("status", "--json", TPUQ_USER="someone-else").stdout)
    assert {j["id"] for j in other} >= set(tasks)
    table = stack.tpuq("status", COLUMNS="200").stdout
    assert f"{tasks[0]}_[0-2999]" in table, table[:2000]
    direct = stack.tpuq("status", "--json",
                        TPUQ_AGENT_SOCKET=str(tmp_path / "no-agent.sock"),
                        TPUQ_DATABASE_URL=stack.extra.get("TPUQ_DATABASE_URL")
                        or f"sqlite:///{stack.home}/tpuq.db")
    assert {j["id"] for j in json.loads(direct.stdout)} >= set(tasks)
    r = stack.tpuq("cancel", "--mine", "--yes", "--json")
    results = json.loads(r.stdout)
    assert len(results) == 3000 and all(x["ok"] for x in results)
    assert _states(stack, tasks) == {"cancelled": 3000}


def test_cancel_of_an_array_of_20000_tasks_finishes_within_the_clients_patience(stack,
                                                                                tmp_path):
    stack.start_agent(FakeHost(tmp_path / "host", chips=8))
    tasks = _array(stack, 20_000)
    r = stack.tpuq("cancel", "--array", str(tasks[0]), "--json")  # the client waits 30 s
    results = json.loads(r.stdout)
    assert [x["id"] for x in results] == tasks and all(x["ok"] for x in results)
    assert _states(stack, tasks) == {"cancelled": 20_000}
    with stack.db.read() as s:  # one event per task, as a one-by-one cancel writes
        from sqlalchemy import func, select

        from tpuq.state.models import JobEvent

        events = s.scalar(select(func.count()).select_from(JobEvent)
                          .where(JobEvent.job_id.in_(tasks), JobEvent.to_state == "cancelled"))
    assert events == 20_000


def _raw(path: str, payload: bytes) -> bytes:
    """Send all of `payload` (as a hostile client would, ignoring any limit), read the
    answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(path)
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data


def test_requests_over_a_limit_get_a_refusal_naming_it(stack, tmp_path):
    stack.start_agent(FakeHost(tmp_path / "host", chips=8))
    path = str(stack.home / "agent.sock")
    # over 1 MiB: the agent reads it all and answers, the sender sees no broken pipe
    big = json.dumps({"op": "submit", "spec": {"name": "x" * (2 * protocol.MAX_MESSAGE)}})
    reply = protocol.decode_reply(_raw(path, big.encode()))
    assert isinstance(reply, protocol.Refusal) and reply.kind is protocol.Failure.BAD_REQUEST
    assert f"over {protocol.MAX_MESSAGE} bytes" in reply.error
    # 100,000 --after ids: refused by the agent before any database is asked...
    many = protocol.encode(protocol.Submit(spec={"command": ["/bin/true"]},
                                           after=list(range(1, 100_001))))
    reply = protocol.decode_reply(_raw(path, many))
    assert isinstance(reply, protocol.Refusal)
    assert "submit.after has 100000 items: a request carries at most 10000" in reply.error
    # ...and by the CLI before it sends: one line, exit status 2
    afters = [a for start in range(1, 100_001, 10_000)  # one argument holds 128 KiB
              for a in ("--after", ",".join(map(str, range(start, start + 10_000))))]
    r = stack.tpuq("submit", *afters, "--", "/bin/true", check=False, cwd="/")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "tpuq: error: submit.after has 100000 items: a request carries at most 10000"]
    r = stack.tpuq("submit", "--array", "0-100000", "--", "/bin/true", check=False, cwd="/")
    assert r.returncode == 2 and "more than 100000 tasks" in r.stderr
    assert "Traceback" not in stack.agents[0].log_tail(200_000)


def test_a_full_agent_says_busy_not_absent(stack, tmp_path):
    """Slots taken by clients that connect and say nothing: the next command is told the
    agent is busy (not that none runs); once the idle ones are cut off, it is served."""
    stack.start_agent(FakeHost(tmp_path / "host", chips=8), TPUQ_AGENT_CONNECTIONS="4")
    path = str(stack.home / "agent.sock")
    idle = []
    for _ in range(4):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        idle.append(s)
    try:
        r = stack.tpuq("status", check=False)
        assert r.returncode == 1
        assert r.stderr.strip() == "tpuq: error: agent busy (4 connections), try again"
        deadline = time.monotonic() + 30  # the agent's read deadline frees the slots
        while stack.tpuq("status", check=False).returncode != 0:
            assert time.monotonic() < deadline, "the idle clients were never cut off"
        for s in idle:  # each was answered, not dropped
            s.settimeout(10)
            assert b"timed out" in s.recv(65536)
    finally:
        for s in idle:
            s.close()
