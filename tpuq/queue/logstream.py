"""Job output for the whole team: the agent ships each attempt's log file into a capped
Redis stream, so `tpuq logs ID -f` works from any machine with the team configuration.

The job itself writes to a local file (the agent is never in its output path, so an
agent restart cannot SIGPIPE a job); a small ticker tails the files of running attempts
into `tpuq:logs:<owner>:<job>:<attempt>` (a slice job's worker N > 0: `...:wN`, so every
worker's output reads from anywhere), capped in bytes and entries and expiring a week
after the attempt's last output (so also when its host died and no end marker ever comes).

The owner in the key is what lets a user's own broker account read their jobs' streams
and nobody else's (queue/accounts.py: read-only on `tpuq:logs:<owner>:*`). Agents from
before it shipped to `tpuq:log:<job>:<attempt>`: readers with the agents' account still
find an attempt there (`legacy_key`), a user's account cannot.

Each entry carries the file offset of its bytes, so a reader knows when the stream no
longer starts at the beginning (trimmed, or lost in a Redis restart) and can say so,
and where the whole file is, instead of printing part of a log as if it were all.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("tpuq.queue")
# What one attempt may keep in Redis (the file on its host has everything): the newest
# MAX_BYTES of its output, in at most MAX_ENTRIES entries (a quiet job's entries are
# small; one per shipping tick is ~14 h of them). A shared Redis is the team's doorbell:
# one chatty job must not be able to fill its memory.
MAX_BYTES = 64 * 1024 * 1024
MAX_ENTRIES = 100_000
CHUNK = 64 * 1024
TTL_S = 7 * 86400
ENDED_KEPT = 4096  # ended attempts remembered, far more than a host runs between ticks


PREFIX = "tpuq:logs:"


def owner_part(owner: str) -> str:
    """The owner as it stands in a key: letters, digits, '_', '.', '-' as they are,
    anything else percent-encoded, so no owner's keys match another owner's pattern
    (a ':' or a glob character in a name would)."""
    from urllib.parse import quote

    return quote(owner, safe="_.-") or "%"


def pattern(owner: str) -> str:
    """Every stream of `owner`'s jobs (a Redis glob)."""
    return f"{PREFIX}{owner_part(owner)}:*"


def key(owner: str, job_id: int, attempt: int, worker: int | None = None) -> str:
    """The stream of one attempt's log; worker 0 of a slice job has the job's own."""
    base = f"{PREFIX}{owner_part(owner)}:{job_id}:{attempt}"
    return f"{base}:w{worker}" if worker else base


def legacy_key(job_id: int, attempt: int, worker: int | None = None) -> str:
    """Where agents before owner keys shipped the attempt's log."""
    return f"tpuq:log:{job_id}:{attempt}:w{worker}" if worker else f"tpuq:log:{job_id}:{attempt}"


def drop(url: str, owner: str, job_id: int, attempt: int, worker: int | None = None) -> None:
    """Remove an attempt's stream (and one an agent from before owner keys shipped)."""
    client(url).delete(key(owner, job_id, attempt, worker), legacy_key(job_id, attempt, worker))


Log = tuple[str, int, int, int]  # owner, job id, attempt, worker (0: single host, worker 0)


def client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)


@dataclass
class _Shipped:
    """One attempt's stream as its shipper knows it: the file offset to ship from next,
    and the entries it holds (id, bytes), oldest first, to trim it by bytes."""

    offset: int = 0
    kept: deque[tuple[bytes, int]] = field(default_factory=deque)
    kept_bytes: int = 0

    def added(self, entry_id: bytes, size: int) -> None:
        self.kept.append((entry_id, size))
        self.kept_bytes += size
        self.offset += size

    def trim_to(self) -> bytes | None:
        """The oldest entry id to keep, if older ones are over the limits."""
        trimmed = False
        while len(self.kept) > 1 and (self.kept_bytes > MAX_BYTES
                                      or len(self.kept) > MAX_ENTRIES):
            self.kept_bytes -= self.kept.popleft()[1]
            trimmed = True
        return self.kept[0][0] if trimmed else None


class LogShipper:
    """Tails log files of running attempts into Redis streams; never fails a job."""

    def __init__(self, url: str) -> None:
        self.redis = client(url)
        self._streams: dict[Log, _Shipped] = {}
        # attempts that ended while Redis was away: their tail and end marker still owed
        self._unfinished: dict[Log, str] = {}
        # attempts whose end marker is shipped (newest last): a tick that still saw one of
        # them running must not ship it again from the start
        self._ended: dict[Log, None] = {}
        self._lock = threading.Lock()

    def ship_unfinished(self) -> None:
        """Retry the final shipping of attempts that ended while Redis was unreachable."""
        with self._lock:
            owed = list(self._unfinished.items())
        for (owner, job_id, attempt, worker), path in owed:
            self.ship(owner, job_id, attempt, path, final=True, worker=worker)

    def ship(self, owner: str, job_id: int, attempt: int, path: str, final: bool = False,
             worker: int | None = None) -> None:
        k = (owner, job_id, attempt, worker or 0)
        name = key(*k)
        with self._lock:
            if k in self._ended:
                return
            st = self._streams.setdefault(k, _Shipped())
            try:
                self._ship_new(name, st, path)
            except Exception as e:  # noqa: BLE001 - Redis down: ship later, the file is safe
                log.debug("log shipping for job %s paused: %s", job_id, e)
                if final:
                    self._unfinished[k] = path
                return
            if final:
                try:
                    # one round trip (not atomic: an end marker without its expiry
                    # is shipped again, as when the connection broke between them)
                    pipe = self.redis.pipeline(transaction=False)
                    pipe.xadd(name, {"eof": b"1"})
                    pipe.expire(name, TTL_S)
                    pipe.execute()
                    self._streams.pop(k, None)
                    self._unfinished.pop(k, None)
                    self._ended[k] = None
                    while len(self._ended) > ENDED_KEPT:
                        del self._ended[next(iter(self._ended))]
                except Exception as e:  # noqa: BLE001
                    log.debug("log end marker for job %s not shipped: %s", job_id, e)
                    self._unfinished[k] = path

    def _ship_new(self, name: str, st: _Shipped, path: str) -> None:
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            return
        with f:
            # more than Redis may keep: skip what would be trimmed at once (the reader
            # sees the gap in the offsets and says where the whole file is)
            st.offset = max(st.offset, os.fstat(f.fileno()).st_size - MAX_BYTES)
            f.seek(st.offset)
            shipped = False
            while chunk := f.read(CHUNK):
                st.added(self.redis.xadd(name, {"d": chunk, "o": st.offset}), len(chunk))
                shipped = True
        if shipped:
            self.redis.expire(name, TTL_S)
        oldest = st.trim_to()
        if oldest is not None:
            self.redis.xtrim(name, minid=oldest, approximate=False)


@dataclass(frozen=True)
class Piece:
    """Output from the stream: `data` starts at byte `offset` of the attempt's log file
    (None from an agent that did not record it); `end` is the attempt's end marker."""

    data: bytes
    offset: int | None = None
    end: bool = False


def read_after(url: str, stream: str, after: str, max_bytes: int
               ) -> tuple[list[tuple[str, Piece]], bool]:
    """Entries of the stream after entry `after` ("0-0": from the start), about
    `max_bytes` of output at most, and whether its end marker was among them. A stream
    this broker account may not read reads as an empty one."""
    import redis

    r = client(url)
    out: list[tuple[str, Piece]] = []
    size = 0
    start = "-" if after == "0-0" else f"({after}"
    while size < max_bytes:
        try:
            batch = r.xrange(stream, min=start, max="+", count=100)
        except redis.exceptions.NoPermissionError:
            return out, False
        if not batch:
            return out, False
        for raw_id, fields in batch:
            entry_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
            if b"eof" in fields:
                return out, True
            piece = Piece(fields[b"d"], int(fields[b"o"]) if b"o" in fields else None)
            out.append((entry_id, piece))
            size += len(piece.data)
            start = f"({entry_id}"
            if size >= max_bytes:
                break
    return out, False


def follow(url: str, stream: str, wait: bool, block_ms: int = 1000) -> Iterator[Piece | None]:
    """Yield the stream's output; with `wait`, block for more until its end marker
    (the last piece, `end=True`).

    Yields None while waiting (so the caller can check whether the job ended).
    """
    r = client(url)
    last = "0-0"
    while True:
        batch = r.xread({stream: last}, count=500, block=block_ms if wait else None)
        if not batch:
            if not wait:
                return
            yield None
            continue
        for entry_id, fields in batch[0][1]:
            last = entry_id
            if b"eof" in fields:
                yield Piece(b"", end=True)
                return
            yield Piece(fields[b"d"], int(fields[b"o"]) if b"o" in fields else None)
