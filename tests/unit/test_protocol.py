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
    (b'{"op": "shutdown"}', "unknown request 'shutdown'"),
    (b'{"op": 3}', "unknown request 3"),
    (b'{"no": "op"}', "unknown request None"),
    (b'{"op": "ping", "extra": 1}', "unknown fields 'extra'"),
    (b'{"op": "submit", "held": "yes"}', "submit.held must be bool"),
    (b'{"op": "submit", "spec": [1]}', "submit.spec must be dict"),
    (b'{"op": "wake", "deployment": 5}', "wake.deployment must be str"),
    (b'{"op": "ping", "deployment": NaN}', "NaN is not a number JSON allows"),
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
    raw = json.dumps({"reply": "refusal", "kind": "meltdown", "error": "x"}).encode()
    with pytest.raises(ProtocolError, match="refusal.kind must be Failure"):
        protocol.decode_reply(raw)


# ---- every message of the registry, by default ------------------------------------------------
SAMPLES: dict[str, object] = {
    "str": "x", "int": 7, "bool": True, "float": 1.5, "dict[str, Any]": {"a": [1, {"b": None}]},
    "dict[str, str]": {"k": "v"}, "list[int]": [1, 2], "list[str]": ["a", "b"],
    "list[list[str]]": [["a", "b"], []], "list[dict[str, Any]]": [{"id": 1}, {}],
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
