"""The local socket protocol: what decodes, and what is refused before any handler runs."""

from __future__ import annotations

import json

import pytest

from tpuq import protocol
from tpuq.protocol import Failure, ProtocolError


@pytest.mark.parametrize("msg", [
    protocol.Ping(), protocol.Wake(deployment="sqlite:/x"),
    protocol.Submit(spec={"command": ["true"]}, held=True, deployment=None),
])
def test_requests_round_trip(msg: protocol.Request) -> None:
    assert protocol.decode_request(protocol.encode(msg)) == msg


@pytest.mark.parametrize("msg", [
    protocol.Pong(pid=1, host="h", deployment="d"), protocol.Done(), protocol.Submitted(id=7),
    protocol.Refusal(kind=Failure.UNAVAILABLE, error="db down"),
])
def test_replies_round_trip(msg: protocol.Reply) -> None:
    assert protocol.decode_reply(protocol.encode(msg)) == msg


@pytest.mark.parametrize(("raw", "says"), [
    (b'{"op": "shutdown", "v": 3}', "unknown request 'shutdown'"),
    (b'{"op": 3, "v": 3}', "unknown request 3"),
    (b'{"no": "op", "v": 3}', "unknown request None"),
    (b'{"op": "ping", "extra": 1, "v": 3}', "unknown fields 'extra'"),
    (b'{"op": "submit", "held": "yes", "v": 3}', "submit.held must be bool"),
    (b'{"op": "submit", "spec": [1], "v": 3}', "submit.spec must be dict"),
    (b'{"op": "wake", "deployment": 5, "v": 3}', "wake.deployment must be str"),
    (b'{"op": "ping", "deployment": NaN}', "NaN is not a number JSON allows"),
    # found by the socket fuzzer: each reached a handler and raised there
    (b'{"op": "control", "action": {"a": 1}, "v": 3}', "control.action must be Action, not dict"),
    (b'{"op": "control", "action": ["cancel"], "v": 3}', "control.action must be Action"),
    (b'{"op": "show", "id": 9223372036854775808, "v": 3}', "show.id holds an integer out of range"),
    (b'{"op": "control", "ids": [1, -9223372036854775809], "v": 3}',
     "control.ids holds an integer out of range"),
    (b'[1, 2]', "a message is a JSON object"),
    (b'\xff\xfe', "not JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 32"),
    (b'{"op": "submit", "spec": ' + b'{"a": ' * 40 + b"1" + b"}" * 41, "nested deeper than 32"),
])
def test_malformed_requests_are_refused_with_the_reason(raw: bytes, says: str) -> None:
    with pytest.raises(ProtocolError, match=says.replace("(", r"\(")):
        protocol.decode_request(raw)


def test_an_oversized_message_is_refused_before_parsing() -> None:
    with pytest.raises(ProtocolError, match="over"):
        protocol.decode_request(b" " * (protocol.MAX_MESSAGE + 1))


def test_a_reply_kind_must_be_a_known_failure() -> None:
    raw = json.dumps({"reply": "refusal", "v": protocol.PROTOCOL, "kind": "meltdown",
                      "error": "x"}).encode()
    with pytest.raises(ProtocolError, match="refusal.kind must be Failure"):
        protocol.decode_reply(raw)


def test_every_message_carries_the_protocol_and_a_client_before_versions_reads_none():
    assert json.loads(protocol.encode(protocol.Ping()))["v"] == protocol.PROTOCOL
    assert "v" not in json.loads(protocol.encode(protocol.Done(), protocol.UNVERSIONED))


@pytest.mark.parametrize("version, says", [
    (None, "upgrade tpuq where you ran it"),  # a client from before versions
    (protocol.PROTOCOL + 1, "upgrade the agent"),
])
def test_an_agent_refuses_a_language_it_does_not_serve_naming_both(version, says):
    raw = {"op": "ping"} if version is None else {"op": "ping", "v": version}
    with pytest.raises(protocol.SkewError, match=says) as e:
        protocol.decode_request(json.dumps(raw).encode())
    assert f"socket protocol {version or 1}, this host's agent" in str(e.value)
    assert "nothing was done" in str(e.value)


def test_a_reply_from_an_agent_before_versions_says_nothing_was_done():
    old = json.dumps({"reply": "refusal", "kind": "bad_request",
                      "error": "bad request: ping: unknown fields 'v'"}).encode()
    with pytest.raises(protocol.SkewError, match="older than this tpuq.*nothing was done"):
        protocol.decode_reply(old)


def test_an_unreadable_reply_of_another_language_says_it_was_carried_out():
    newer = json.dumps({"reply": "submitted", "v": protocol.PROTOCOL + 1, "ids": [1],
                        "shiny": True}).encode()
    with pytest.raises(protocol.SkewError, match="it carried the request out"):
        protocol.decode_reply(newer)
    same = json.dumps({"reply": "submitted", "v": protocol.PROTOCOL, "shiny": True}).encode()
    with pytest.raises(protocol.ProtocolError, match="unknown fields") as e:
        protocol.decode_reply(same)
    assert not isinstance(e.value, protocol.SkewError)


# ---- every message of the registry, by default ------------------------------------------------
SAMPLES: dict[str, object] = {
    "str": "x", "int": 7, "bool": True, "float": 1.5, "dict[str, Any]": {"a": [1, {"b": None}]},
    "dict[str, str]": {"k": "v"}, "list[int]": [1, 2], "list[str]": ["a", "b"],
    "list[list[str]]": [["a", "b"], []], "list[dict[str, Any]]": [{"id": 1}, {}],
    "list[list[int]]": [[54, 2]],
    "Failure": Failure.BUSY, "Action": protocol.Action.HOLD,
}


def sample(cls: type[protocol.Message]) -> protocol.Message:
    """`cls` with a value other than its default in every field (a field of a type with no
    sample fails here: add one, so the new type is covered too)."""
    values = {}
    for name, kind, _ in cls._fields:
        base = kind.replace(" | None", "")
        assert base in SAMPLES, f"{cls.__name__}.{name}: no sample of {kind}"
        values[name] = SAMPLES[base]
    return cls(**values)


@pytest.mark.parametrize("cls", list(protocol.REQUESTS.values()), ids=list(protocol.REQUESTS))
def test_every_request_round_trips(cls: type[protocol.Request]) -> None:
    msg = sample(cls)
    assert protocol.decode_request(protocol.encode(msg)) == msg
    assert protocol.decode_request(protocol.encode(cls())) == cls()


@pytest.mark.parametrize("cls", list(protocol.REPLIES.values()), ids=list(protocol.REPLIES))
def test_every_reply_round_trips(cls: type[protocol.Reply]) -> None:
    msg = sample(cls)
    assert protocol.decode_reply(protocol.encode(msg)) == msg
    assert protocol.decode_reply(protocol.encode(cls())) == cls()


# ---- limits ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("req", "says"), [
    (protocol.Submit(after=list(range(protocol.MAX_IDS + 1))),
     f"submit.after has {protocol.MAX_IDS + 1} items: a request carries at most "
     f"{protocol.MAX_IDS}"),
    (protocol.Control(ids=list(range(protocol.MAX_IDS + 1))), "control.ids has"),
    (protocol.Resubmit(ids=list(range(protocol.MAX_IDS + 1))), "resubmit.ids has"),
    (protocol.Submit(array=list(range(protocol.MAX_TASKS + 1))),
     f"at most {protocol.MAX_TASKS}"),
])
def test_a_list_over_its_limit_is_refused_naming_it(req: protocol.Request, says: str) -> None:
    with pytest.raises(ProtocolError, match=says):
        protocol.check_limits(req)
    with pytest.raises(ProtocolError, match=says):
        protocol.decode_request(protocol.encode(req))


def test_lists_at_their_limit_pass() -> None:
    protocol.check_limits(protocol.Submit(after=list(range(protocol.MAX_IDS)),
                                          array=list(range(protocol.MAX_TASKS))))


def test_a_request_too_big_to_send_is_refused_naming_the_limit() -> None:
    req = protocol.Submit(spec={"name": "x" * protocol.MAX_MESSAGE})
    with pytest.raises(ProtocolError, match=f"a request is at most {protocol.MAX_MESSAGE} bytes"):
        protocol.check_size(req)
