"""Replies as frames: any size goes through, every frame stays under the limit, and a
stream cut short or padded is garbled, never a shorter answer."""

from __future__ import annotations

import json

import pytest

from tests.unit.test_protocol import sample
from tpuq import framing, protocol
from tpuq.protocol import MAX_MESSAGE, ProtocolError


def job(i: int) -> dict:
    return {"id": i, "state": "held", "command": ["/bin/true", "x" * (i % 700)], "owner": "a"}


def through(reply: protocol.Reply) -> tuple[protocol.Reply, list[bytes]]:
    frames = list(framing.frames(reply))
    assert all(len(f) <= MAX_MESSAGE + 1 for f in frames)
    assert len(frames) == 1 or all(f.endswith(b"\n") for f in frames)
    return framing.decode(framing.split(b"".join(frames))), frames


def test_a_small_reply_is_one_frame_the_message_itself() -> None:
    reply = protocol.Submitted(id=3, tasks=[3, 4])
    back, frames = through(reply)
    assert back == reply and frames == [protocol.encode(reply)]  # as an earlier release


def test_a_listing_of_100000_jobs_comes_whole_in_frames_under_the_limit() -> None:
    reply = protocol.JobList(jobs=[job(i) for i in range(100_000)], hosts=[{"name": "h"}],
                             now=5.0, fleet=["a line"])
    back, frames = through(reply)
    assert len(frames) > 20
    assert back == reply


@pytest.mark.parametrize("cls", list(protocol.REPLIES.values()), ids=list(protocol.REPLIES))
def test_every_reply_with_lists_goes_through_in_parts(cls: type[protocol.Reply]) -> None:
    msg = sample(cls)
    lists = {name: value for name, value in msg.as_dict().items() if isinstance(value, list)}
    big = msg.replace(**{name: value * (MAX_MESSAGE // 4) for name, value in lists.items()})
    back, frames = through(big)
    assert back == big
    if lists:
        assert len(frames) > 2


def test_a_stream_cut_short_or_padded_is_garbled() -> None:
    frames = list(framing.frames(protocol.Results(results=[{"id": i, "ok": True,
                                                             "message": "x" * 200}
                                                            for i in range(20_000)])))
    lines = framing.split(b"".join(frames))
    with pytest.raises(ProtocolError, match="cut short"):
        framing.decode(lines[:-1])
    with pytest.raises(ProtocolError, match="after the end"):
        framing.decode([*lines, lines[-1]])


@pytest.mark.parametrize("part", [
    {"reply": "part", "field": "nope", "items": []},
    {"reply": "part", "field": "id", "items": []},  # not a list field
    {"reply": "part", "field": "tasks", "items": ["not an int"]},
    {"reply": "done", "field": "tasks", "items": []},
    {"reply": "part", "field": "tasks", "items": [], "extra": 1},
])
def test_a_part_that_does_not_belong_is_garbled(part: dict) -> None:
    head = json.dumps({"reply": "submitted", "id": 1, "more": 1}).encode()
    with pytest.raises(ProtocolError):
        framing.decode([head, json.dumps(part).encode()])


@pytest.mark.parametrize("more", [-1, "2", framing.MAX_FRAMES + 1, True])
def test_the_count_of_parts_is_checked(more: object) -> None:
    with pytest.raises(ProtocolError, match="parts"):
        framing.decode([json.dumps({"reply": "done", "more": more}).encode()])


def test_an_item_no_frame_holds_is_refused_when_sending() -> None:
    with pytest.raises(ProtocolError, match="one item of jobs"):
        list(framing.frames(protocol.JobList(jobs=[{"x": "y" * MAX_MESSAGE}])))
