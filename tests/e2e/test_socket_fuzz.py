"""The agent survives anything a local user can send on its socket: arbitrary bytes, any
JSON shape and depth, well-formed requests with ill-typed fields, and a client hanging up
at any moment. A real agent, driven by hypothesis through a client process running as an
unprivileged account; afterwards the agent still runs jobs."""

from __future__ import annotations

import base64
import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.harness import PYTHONPATH, FakeHost, Stack, python_for
from tpuq import protocol

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="the hostile client runs as another account: needs root")
EXAMPLES = int(os.environ.get("TPUQ_FUZZ_EXAMPLES", "150"))

# the hostile client: one connection per line of instructions on stdin
CLIENT = r"""
import base64, json, socket, struct, sys
path = sys.argv[1]
for line in sys.stdin:
    msg = json.loads(line)
    data, how = base64.b64decode(msg["data"]), msg["how"]
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(15)
    try:
        s.connect(path)
        if how == "nothing":
            pass
        elif how == "half":
            s.sendall(data[: len(data) // 2])
        elif how == "reset":
            s.sendall(data)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif how == "close":
            s.sendall(data)
        else:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
        result = "done"
    except OSError as e:
        result = f"error {e}"
    finally:
        s.close()
    print(result, flush=True)
"""


class Hostile:
    def __init__(self, socket_path: str, python: str) -> None:
        nobody = pwd.getpwnam("nobody")
        env = {"PYTHONPATH": PYTHONPATH}
        self.proc = subprocess.Popen(
            [python, "-c", CLIENT, socket_path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=env, cwd="/", user=nobody.pw_uid, group=nobody.pw_gid,
            extra_groups=[])

    def send(self, data: bytes, how: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"data": base64.b64encode(data).decode(),
                                          "how": how}) + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def target() -> Iterator[tuple[Stack, Hostile]]:
    nobody = pwd.getpwnam("nobody")
    python = python_for(nobody.pw_uid, nobody.pw_gid)
    if python is None:
        pytest.skip("no Python here that the account `nobody` may run")
    home = Path(tempfile.mkdtemp(prefix="tpuq-fuzz-"))
    home.chmod(0o755)
    stack = Stack(home=home / "home")
    hostile: Hostile | None = None
    try:
        stack.start_agent(FakeHost(home / "host-a"))
        hostile = Hostile(str(stack.home / "agent.sock"), python)
        assert hostile.send(b'{"op": "ping"}', "whole") == "done", "nobody reaches the socket"
        yield stack, hostile
    finally:
        if hostile is not None:
            hostile.close()
        stack.cleanup()
        shutil.rmtree(home, ignore_errors=True)


scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
           | st.text(max_size=20))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=15)


def well_typed(kind: str) -> st.SearchStrategy[Any]:
    """Values of a protocol field's annotation (tpuq/protocol.py `_CHECKS`), edges included:
    huge and negative numbers, lists past MAX_IDS, unknown enum words nearby."""
    base = kind.replace(" | None", "")
    ids = st.integers(-2**63, 2**63) | st.integers(0, 50)
    plain: dict[str, st.SearchStrategy[Any]] = {
        "str": st.text(max_size=30), "bool": st.booleans(), "int": ids,
        "float": st.floats(allow_nan=False, allow_infinity=False),
        "dict[str, Any]": st.dictionaries(st.text(max_size=10), values, max_size=5),
        "dict[str, str]": st.dictionaries(st.text(max_size=10), st.text(max_size=10),
                                          max_size=5),
        "list[int]": st.lists(ids, max_size=8)
        | st.integers(protocol.MAX_IDS - 1, protocol.MAX_IDS + 2).map(lambda n: [1] * n),
        "list[str]": st.lists(st.text(max_size=10), max_size=5),
        "list[list[str]]": st.lists(st.lists(st.text(max_size=5), max_size=3), max_size=4),
        "list[list[int]]": st.lists(st.lists(ids, max_size=3), max_size=4),
        "list[dict[str, Any]]": st.lists(st.dictionaries(st.text(max_size=5), values,
                                                         max_size=3), max_size=3),
        "Failure": st.sampled_from([f.value for f in protocol.Failure] + ["meltdown"]),
        "Action": st.sampled_from([a.value for a in protocol.Action] + ["explode"]),
    }
    strategy = plain[base]  # a new field type fails here until it is fuzzed too
    return strategy | st.none() if "None" in kind else strategy


def spec_values() -> st.SearchStrategy[dict[str, Any]]:
    """A job spec near a valid one, each field of JobSpec fuzzed in turn; the command
    stays harmless (the agent runs what is accepted)."""
    from tpuq.spec import SPEC_FIELDS

    base = {"command": ["/bin/true"], "cwd": "/", "owner": "x", "team": "default"}
    return st.dictionaries(st.sampled_from([f for f in SPEC_FIELDS if f != "command"]),
                           values, max_size=3).map(lambda more: {**base, **more})


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 6))
    if kind == 0:
        return draw(st.binary(max_size=600))
    if kind == 1:
        return json.dumps(draw(values)).encode()
    if kind == 2:  # depth far beyond what a request has
        n = draw(st.integers(30, 5000))
        return draw(st.sampled_from([b"[", b'{"a":'])) * n
    op = draw(st.sampled_from([*protocol.REQUESTS, "nope"]))
    cls = protocol.REQUESTS.get(op)
    fields = {name: kind for name, kind, _ in (cls._fields if cls else ())}
    body: dict[str, Any] = {"op": op, "v": protocol.PROTOCOL}
    for name in draw(st.lists(st.sampled_from(sorted(fields) or ["x"]), unique=True,
                              max_size=len(fields) or 1)):
        # mostly the field's own type (past the decoder, into the handlers), else anything
        typed = kind >= 4 and name in fields
        body[name] = draw(well_typed(fields[name]) if typed else values)
    if op == "submit" and kind >= 4:
        body["spec"] = draw(spec_values())
    if kind == 6:
        body[draw(st.text(max_size=5))] = draw(values)
    return json.dumps(body).encode()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=requests(), how=st.sampled_from(["whole", "whole", "close", "half", "reset",
                                             "nothing"]))
def test_the_agent_survives_what_a_local_user_sends(target, data, how):
    stack, hostile = target
    hostile.send(data, how)
    agent = stack.agents[0]
    assert agent.proc is not None and agent.proc.poll() is None, agent.log_tail()


def test_after_all_that_the_agent_still_runs_jobs(target):
    stack, _ = target
    # the fuzzer's valid submits queue jobs of their own (thousands in a long run:
    # TPUQ_FUZZ_EXAMPLES); cancelled first, as an admin, so this job does not wait for them
    left = [str(j["id"]) for j in json.loads(stack.tpuq("status", "--json").stdout)
            if j["state"] in ("queued", "held", "assigned", "running")]
    if left:
        stack.tpuq("cancel", *left, check=False)  # some end meanwhile: not an error here
    job = stack.submit("--", "/bin/true", cwd="/")
    stack.wait_state(job, "succeeded")
    log = stack.agents[0].log_tail(200_000)
    assert "Traceback" not in log, log[max(0, log.find("Traceback") - 300):][:4000]
