"""A job's output, read from where it is, a bounded chunk per request.

An attempt's log is a file on its host (the agent writes it; jobs only get the file
descriptor). On that host, and in the embedded deployment, it is read directly.
Elsewhere, in the team deployment, it comes from the Redis stream its agent ships it to
(queue/logstream.py), which may no longer hold all of it: then a note says how much is
missing and where the whole file is, rather than passing part of a log off as all of it.

Positions tell the client where it is in each attempt, so `tpuq logs -f` asks again
from there: "f:<offset>" in a file, "s:<entry>:<offset>" in a stream ("o:..." in a
stream an agent from before owner keys shipped: logstream.legacy_key), "end" when done.
"""

from __future__ import annotations

import base64
from types import SimpleNamespace
from typing import Any

from tpuq.api.caller import Caller, not_found, owned_job
from tpuq.protocol import LogChunk, ReadLog
from tpuq.settings import Settings
from tpuq.state import gangs, queries
from tpuq.state.db import Database

MAX_CHUNK = 512 * 1024  # bytes of output per reply (base64 in JSON stays under 1 MiB)
SETTLE_S = 3.0  # an attempt over this long has had its end marker shipped, if ever


def read(settings: Settings, db: Database, here: str, req: ReadLog, caller: Caller) -> LogChunk:
    with db.read() as s:
        row = owned_job(s, caller, req.id, "output")
        atts = queries.attempts_of(s, req.id)
        now = queries.now(s)
        worker_logs = gangs.log_paths(s, req.id) if req.worker not in (None, 0) else {}
    numbers = [a.number for a in atts]
    if req.attempt is not None:
        if req.attempt not in numbers:
            have = (f"it has attempt{'s' if len(numbers) > 1 else ''} "
                    f"{', '.join(map(str, numbers))}") if numbers else f"it has not started ({row.state})"
            raise not_found(f"job {req.id} has no attempt {req.attempt}: {have}")
        atts = [a for a in atts if a.number == req.attempt]
    reader = _Reader(settings, here, req, now, row.owner)
    shown = atts if req.worker in (None, 0) else _workers_of(req, atts, worker_logs)
    for a in shown:
        if not reader.attempt(a):
            break
    done = queries.is_terminal(row.state) and reader.all_read
    # what the client says of an attempt that printed nothing (never of one whose output
    # a note says is elsewhere: it may have written plenty)
    outcomes = {str(a.number): _outcome_words(a) for a in atts
                if a.outcome is not None and a.number not in reader.elsewhere}
    return LogChunk(state=row.state, attempts=numbers, pieces=reader.pieces,
                    notes=reader.notes, positions=reader.positions, ended=done,
                    reason=row.reason or "", outcomes=outcomes)


def _outcome_words(a: Any) -> str:
    """How an attempt ended, in the words of `show`; one that never started says so."""
    how = str(a.outcome) if a.started_at is not None else f"{a.outcome} before it started"
    return f"{how}: {a.reason}" if a.reason else how


def _workers_of(req: ReadLog, atts: Any, logs: dict[tuple[int, int], tuple[str, str | None]]
                ) -> list[Any]:
    """A slice job's attempts as one log per worker (the `worker` asked, or all of them)."""
    out = []
    for a in atts:
        for (_, w), (host, path) in sorted(i for i in logs.items() if i[0][0] == a.number):
            if req.worker in (-1, w):
                out.append(SimpleNamespace(number=a.number, host=host, log_path=path,
                                           ended_at=a.ended_at, worker=w))
    if not out and atts:
        raise not_found(f"job {req.id} has no worker {req.worker}")
    return out


class _Reader:
    def __init__(self, settings: Settings, here: str, req: ReadLog, now: float,
                 owner: str) -> None:
        self.settings = settings
        self.owner = owner
        self.here = here
        self.job_id = req.id
        self.now = now
        self.budget = max(1, min(req.max_bytes, MAX_CHUNK))
        self.positions = dict(req.positions)
        self.pieces: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.all_read = True
        self.elsewhere: set[int] = set()  # attempts whose output is only on their host

    def attempt(self, a: Any) -> bool:
        """Read what is new of attempt `a`; False once the reply is full."""
        worker = getattr(a, "worker", None)
        key = str(a.number) if worker is None else f"{a.number}.w{worker}"
        pos = self.positions.get(key, "")
        if pos == "end":
            return True
        if self.settings.embedded or a.host == self.here or not self.settings.broker_url:
            complete = self._file(a, key, pos)
        else:
            complete = self._stream(a, key, pos)
        if complete:
            self.positions[key] = "end"
        else:
            self.all_read = False
        return self.budget > 0

    def _over(self, a: Any) -> bool:
        return a.ended_at is not None and self.now - a.ended_at > SETTLE_S

    def _add(self, a: Any, data: bytes, source: str) -> None:
        piece = {"attempt": a.number, "host": a.host, "source": source,
                 "data": base64.b64encode(data).decode()}
        if getattr(a, "worker", None) is not None:
            piece["worker"] = a.worker
        self.pieces.append(piece)
        self.budget -= len(data)

    def _file(self, a: Any, key: str, pos: str) -> bool:
        offset = int(pos[2:]) if pos.startswith("f:") else 0
        try:
            with open(a.log_path or "", "rb") as f:
                f.seek(offset)
                data = f.read(self.budget)
                at_end = not f.read(1)
        except OSError:  # never started, or its file is gone
            if a.log_path and a.ended_at is not None:
                self.notes.append(f"attempt {a.number}'s log is no longer kept ({a.host}:"
                                  f"{a.log_path}): ended attempts' logs go after "
                                  "TPUQ_LOG_KEEP_DAYS, or when their owner's are over "
                                  "TPUQ_LOG_BUDGET_BYTES")
            return a.ended_at is not None
        if data:
            self._add(a, data, "file")
        self.positions[key] = f"f:{offset + len(data)}"
        return a.ended_at is not None and at_end

    def _stream(self, a: Any, key: str, pos: str) -> bool:
        import redis

        try:
            return self._stream_read(a, key, pos)
        except redis.exceptions.RedisError as e:  # away, or this account is not let in
            why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            self.notes.append(f"attempt {a.number}'s output cannot be read from the broker "
                              f"({why}); the whole log is {a.host}:{a.log_path}")
            return True

    def _stream_read(self, a: Any, key: str, pos: str) -> bool:
        from tpuq.queue import logstream

        last, expected = "0-0", 0
        legacy = pos.startswith("o:")
        if pos.startswith(("s:", "o:")):
            last, _, offset = pos[2:].rpartition(":")
            expected = int(offset)
        where = f"{a.host}:{a.log_path}"
        url, worker = self.settings.broker_url, getattr(a, "worker", None)
        stream = (logstream.legacy_key(self.job_id, a.number, worker) if legacy
                  else logstream.key(self.owner, self.job_id, a.number, worker))
        entries, ended = logstream.read_after(url, stream, last, self.budget)
        if not entries and not ended and last == "0-0" and not legacy:
            # nothing under its name: an agent from before owner keys may have shipped it
            # (only the agents' broker account may read those)
            old = logstream.read_after(url, logstream.legacy_key(self.job_id, a.number, worker),
                                       last, self.budget)
            if old[0] or old[1]:
                (entries, ended), legacy = old, True
        for entry_id, piece in entries:
            last = entry_id
            data = piece.data
            if piece.offset is not None:
                if piece.offset > expected:
                    self.notes.append(f"{piece.offset - expected} bytes of attempt {a.number}'s "
                                      f"output are no longer in Redis; the whole log is {where}")
                data = data[max(0, expected - piece.offset):]  # shipped twice: once
                expected = max(expected, piece.offset + len(piece.data))
            if data:
                self._add(a, data, "stream")
        self.positions[key] = f"{'o' if legacy else 's'}:{last}:{expected}"
        if ended:
            return True
        if entries or not self._over(a):
            return False
        if not a.log_path:
            return True  # it never started: it wrote nothing, anywhere
        what = "the end of" if expected else "any of"
        self.notes.append(f"{what} attempt {a.number}'s output is not in Redis (its host died, "
                          f"or it expired, or Redis restarted); the whole log is {where}")
        self.elsewhere.add(a.number)
        return True
