"""A reply on the agent's socket as frames: no reply is too big to send, no frame too big
to read.

Each frame is one JSON object of at most protocol.MAX_MESSAGE bytes; frames are ended by
a newline (JSON text never holds a raw one). A reply that fits is one frame, the message
itself and nothing more (what a client of an earlier release reads).
A bigger one (the listing of 100,000 jobs, the results of cancelling 20,000 tasks) is a
head, the reply with its lists emptied and `"more": N`, then N parts
`{"reply": "part", "field": <list>, "items": [...]}` that the client appends in order.
The count makes a stream cut short (an agent that died) garbled, never a short answer.

Stdlib only, like protocol.py: the CLI reads replies through here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from tpuq import protocol
from tpuq.protocol import ProtocolError, Reply

TYPE_CHECKING = False  # typing costs an import; the type checker reads this as True
if TYPE_CHECKING:
    from typing import Any

PART = "part"
MAX_FRAMES = 4096  # parts of one reply: 4 GiB, past anything a queue lists
_ROOM = protocol.MAX_MESSAGE - 200  # a part's items, leaving room for its envelope
SAMPLE = 64  # items of each list encoded to guess the size of all


def frames(reply: Reply, version: int = protocol.PROTOCOL) -> Iterator[bytes]:
    """The frames of `reply` (a big one's each ended by a newline), in the socket protocol
    `version` (the head carries it; parts are the head's). Each item is encoded once: a
    reply with lists too long to fit (sized from a sample) goes to parts without a first
    try."""
    lists = {name: v for name, v in reply.as_dict().items() if isinstance(v, list) and v}
    sample = [x for v in lists.values() for x in v[:SAMPLE]]
    average = len(_json(sample)) / len(sample) if sample else 0.0
    if average * sum(len(v) for v in lists.values()) < protocol.MAX_MESSAGE / 2:
        whole = protocol.encode(reply, version)
        if len(whole) <= protocol.MAX_MESSAGE:
            yield whole
            return
    parts = [(name, chunk) for name, items in lists.items()
             for chunk in _chunks(name, items, average)]
    emptied = protocol.encode(reply.replace(**{name: [] for name in lists}), version)
    raw = b'{"more": %d, ' % len(parts) + emptied[1:]
    if len(raw) > protocol.MAX_MESSAGE:
        raise ProtocolError(f"a {reply.NAME} reply is over {protocol.MAX_MESSAGE} bytes "
                            "without its lists")
    yield raw + b"\n"
    for name, chunk in parts:
        yield b'{"reply": "%s", "field": "%s", "items": [%s]}\n' % (
            PART.encode(), name.encode(), chunk)


def _chunks(name: str, items: list[Any], average: float) -> Iterator[bytes]:
    """The items' JSON, comma-joined, in pieces of at most _ROOM bytes (sized from the
    `average` item, halved where a piece turns out bigger)."""
    step = max(1, int(_ROOM * 0.9 / max(average, 1.0)))
    for start in range(0, len(items), step):
        yield from _fit(name, items[start:start + step])


def _fit(name: str, items: list[Any]) -> Iterator[bytes]:
    raw = _json(items)[1:-1]
    if len(raw) <= _ROOM:
        yield raw
    elif len(items) == 1:
        raise ProtocolError(f"one item of {name} is over {protocol.MAX_MESSAGE} bytes")
    else:
        half = len(items) // 2
        yield from _fit(name, items[:half])
        yield from _fit(name, items[half:])


def _json(value: Any) -> bytes:
    return json.dumps(value, allow_nan=False, default=str).encode()


def decode(lines: Iterable[bytes]) -> Reply:
    """The reply that `lines` (the frames, without their newlines) carry; ProtocolError
    for anything but a whole, well-formed one."""
    it = iter(lines)
    first = next(it, None)
    if first is None:
        raise ProtocolError("no reply")
    head = protocol.parse(first, nesting=False)
    more = head.pop("more", 0)
    if not protocol.is_int(more) or not 0 <= more <= MAX_FRAMES:
        raise ProtocolError(f"a reply's parts are 0 to {MAX_FRAMES}, not {more!r}")
    reply = protocol.reply_from(head)
    kinds = {name: kind for name, kind, _ in type(reply)._fields if kind.startswith("list[")}
    for _ in range(more):
        raw = next(it, None)
        if raw is None:
            raise ProtocolError(f"a reply cut short: {more} parts announced")
        part = protocol.parse(raw, nesting=False)
        field = part.get("field")
        items = part.get("items")
        if part.get("reply") != PART or set(part) != {"reply", "field", "items"} \
                or not isinstance(field, str) or field not in kinds:
            raise ProtocolError(f"not a part of a {reply.NAME} reply")
        protocol.checked(items, kinds[field], f"{reply.NAME}.{field}")
        getattr(reply, field).extend(items)
    if next(it, None) is not None:
        raise ProtocolError("frames after the end of a reply")
    return reply


def split(data: bytes) -> list[bytes]:
    """The frames in what a client read (the last newline ends the last frame)."""
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    return lines
