"""Job output for the whole team: the agent ships each attempt's log file into a capped
Redis stream, so `tpuq logs ID -f` works from any machine with the team configuration.

The job itself writes to a local file (the agent is never in its output path, so an
agent restart cannot SIGPIPE a job); a small ticker tails the files of running attempts
into `tpuq:log:<job>:<attempt>` (MAXLEN ~ LINES entries, expiring after a week).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("tpuq.queue")
MAXLEN = 20_000  # stream entries kept per attempt (each up to CHUNK bytes)
CHUNK = 64 * 1024
TTL_S = 7 * 86400


def key(job_id: int, attempt: int) -> str:
    return f"tpuq:log:{job_id}:{attempt}"


def client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)


class LogShipper:
    """Tails log files of running attempts into Redis streams; never fails a job."""

    def __init__(self, url: str) -> None:
        self.redis = client(url)
        self._offsets: dict[tuple[int, int], int] = {}
        # attempts that ended while Redis was away: their tail and end marker still owed
        self._unfinished: dict[tuple[int, int], str] = {}
        self._lock = threading.Lock()

    def ship_unfinished(self) -> None:
        """Retry the final shipping of attempts that ended while Redis was unreachable."""
        with self._lock:
            owed = list(self._unfinished.items())
        for (job_id, attempt), path in owed:
            self.ship(job_id, attempt, path, final=True)

    def ship(self, job_id: int, attempt: int, path: str, final: bool = False) -> None:
        k = (job_id, attempt)
        with self._lock:
            offset = self._offsets.get(k, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    while chunk := f.read(CHUNK):
                        self.redis.xadd(key(*k), {"d": chunk}, maxlen=MAXLEN, approximate=True)
                        offset += len(chunk)
            except FileNotFoundError:
                pass
            except Exception as e:  # noqa: BLE001 - Redis down: ship later, the file is safe
                log.debug("log shipping for job %s paused: %s", job_id, e)
                self._offsets[k] = offset
                if final:
                    self._unfinished[k] = path
                return
            self._offsets[k] = offset
            if final:
                try:
                    self.redis.xadd(key(*k), {"eof": b"1"}, maxlen=MAXLEN, approximate=True)
                    self.redis.expire(key(*k), TTL_S)
                    self._offsets.pop(k, None)
                    self._unfinished.pop(k, None)
                except Exception as e:  # noqa: BLE001
                    log.debug("log end marker for job %s not shipped: %s", job_id, e)
                    self._unfinished[k] = path


def follow(url: str, job_id: int, attempt: int, wait: bool,
           block_ms: int = 1000) -> Iterator[bytes | None]:
    """Yield the attempt's output chunks; with `wait`, block for more until its end.

    Yields None while waiting (so the caller can check whether the job ended).
    """
    r = client(url)
    last = "0-0"
    while True:
        batch = r.xread({key(job_id, attempt): last}, count=500, block=block_ms if wait else None)
        if not batch:
            if not wait:
                return
            yield None
            continue
        for entry_id, fields in batch[0][1]:
            last = entry_id
            if b"eof" in fields:
                return
            yield fields[b"d"]

