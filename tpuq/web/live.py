"""A job's output as server-sent events: its last lines, then each new line as it comes.

The same ReadLog request as `tpuq logs -f`, as the signed-in person (its owner or an
admin; anyone else gets 403 before a byte is sent). Each event carries, as its id,
where the log was read up to, so a browser that reconnects (EventSource does so by
itself) goes on from there instead of from the start.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from tpuq.api.caller import Caller
from tpuq.protocol import LogChunk, ReadLog
from tpuq.web import data

if TYPE_CHECKING:
    from tpuq.web.site import Web

TAIL_LINES = 200  # lines of earlier output a page starts with
POLL_S = 1.0
STREAM_S = 600.0  # one connection's length; the browser reconnects and goes on


def log_stream(web: Web, request: Request) -> Response:
    caller = web.caller(request)
    job_id = int(request.path_params["id"])
    positions = _positions(request.headers.get("last-event-id"))
    first = data.ask(web.api, caller, ReadLog(id=job_id, positions=positions), LogChunk)
    return StreamingResponse(_events(web, caller, job_id, first, fresh=not positions),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def _positions(raw: str | None) -> dict[str, str]:
    try:
        value = json.loads(base64.urlsafe_b64decode((raw or "").encode()) or b"{}")
    except ValueError:
        return {}
    ok = isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    return {str(k): v for k, v in value.items()} if ok else {}


async def _events(web: Web, caller: Caller, job_id: int, chunk: LogChunk,
                  fresh: bool) -> AsyncIterator[str]:
    text, positions = _text(chunk), chunk.positions
    while fresh and chunk.pieces:  # catch up, then send only the tail
        chunk = await run_in_threadpool(_read, web, caller, job_id, positions)
        text, positions = text + _text(chunk), chunk.positions
    if fresh:
        tail = text.splitlines(keepends=True)[-TAIL_LINES:]
        text = "".join(tail)
    yield _event(text, positions)
    elapsed = 0.0
    while not chunk.ended and elapsed < STREAM_S:
        await anyio.sleep(POLL_S)
        elapsed += POLL_S
        chunk = await run_in_threadpool(_read, web, caller, job_id, positions)
        positions = chunk.positions
        if chunk.pieces:
            yield _event(_text(chunk), positions)
    if chunk.ended:
        yield f"event: end\ndata: {json.dumps(chunk.state)}\n\n"


def _read(web: Web, caller: Caller, job_id: int, positions: dict[str, str]) -> LogChunk:
    return data.ask(web.api, caller, ReadLog(id=job_id, positions=positions), LogChunk)


def _text(chunk: LogChunk) -> str:
    return "".join(base64.b64decode(p["data"]).decode(errors="replace") for p in chunk.pieces)


def _event(text: str, positions: dict[str, Any]) -> str:
    """One event: the output's text (JSON, so newlines cannot end the event)."""
    mark = base64.urlsafe_b64encode(json.dumps(positions).encode()).decode()
    return f"id: {mark}\ndata: {json.dumps(text)}\n\n"
