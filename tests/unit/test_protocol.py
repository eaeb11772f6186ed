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
    (b'{"op": "shutdown", "v": 2}', "unknown request 'shutdown'"),
    (b'{"op": 3, "v": 2}', "unknown request 3"),
    (b'{"no": "op", "v": 2}', "unknown request None"),
    (b'{"op": "ping", "extra": 1, "v": 2}', "unknown fields 'extra'"),
    (b'{"op": "submit", "held": "yes", "v": 2}', "submit.held must be bool"),
    (b'{"op": "submit", "spec": [1], "v": 2}', "submit.spec must be dict"),
    (b'{"op": "wake", "deployment": 5, "v": 2}', "wake.deployment must be str"),
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
