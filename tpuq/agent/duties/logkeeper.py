"""Job logs on this host, within budgets: a duty of every agent (TPUQ_LOG_CHECK_S).

One attempt's output is capped (TPUQ_LOG_MAX_BYTES), but a job that fails and is
retried, or a sweep, adds a log per attempt. So each pass, over the attempts whose files
lie in this host's log directory (the log and what sits beside it: progress, exit,
function call and result):

- an attempt that ended more than TPUQ_LOG_KEEP_DAYS ago loses its files and its Redis
  stream;
- an owner whose logs here take more than TPUQ_LOG_BUDGET_BYTES loses the oldest ended
  attempts' files (and streams) until they fit. A running attempt's are never touched
  (nor one this agent still supervises): when running attempts alone are over, the owner
  is over budget, and `tpuq submit`, `status` and `show` say so;
- the ended attempts' streams this host shipped are kept to TPUQ_LOG_STREAM_BUDGET_BYTES
  in Redis, the newest first (their files stay; `tpuq logs` reads those on the host and
  says where they are elsewhere);
- what each owner's logs take here is recorded (state/logusage.py).

Logs of an earlier database (another instance directory) go by age alone.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tpuq.settings import Settings
from tpuq.spec import show_size
from tpuq.state import logusage, queries
from tpuq.state.db import Database

log = logging.getLogger("tpuq.agent")
# <job>.<attempt>[.w<worker>].log, and beside it .progress, .exit, .fn, .result
_NAME = re.compile(r"(\d+)\.(\d+)(?:\.w(\d+))?\.log(?:\.[a-z]+)?\Z")
Key = tuple[int, int, int]  # job id, attempt, worker (0: a single-host job's)


@dataclass
class Files:
    """One attempt's (one worker's) files here: their paths, the disk they take, the
    size of its log, the newest mtime."""

    paths: list[str] = field(default_factory=list)
    size: int = 0
    log_size: int = 0
    newest: float = 0.0

    def add(self, path: str, st: os.stat_result, is_log: bool) -> None:
        self.paths.append(path)
        self.size += st.st_blocks * 512  # what it takes on disk (a sparse file lies)
        self.newest = max(self.newest, st.st_mtime)
        if is_log:
            self.log_size = st.st_size


def scan(directory: str) -> dict[Key, Files]:
    """The attempts whose files are in `directory`."""
    found: dict[Key, Files] = defaultdict(Files)
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return {}
    for entry in entries:
        m = _NAME.match(entry.name)
        if m is None:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        found[(int(m[1]), int(m[2]), int(m[3] or 0))].add(entry.path, st,
                                                         entry.name.endswith(".log"))
    return dict(found)


class LogKeeper:
    """`live()`: the (job, attempt) this agent supervises now; `drop_stream(owner, job,
    attempt, worker)`: remove an attempt's Redis stream (None: no broker). Only this
    host's attempts are its to keep (hosts may share a state directory)."""

    def __init__(self, settings: Settings, db: Database, host: str, directory: str,
                 live: Callable[[], Iterable[tuple[int, int]]],
                 drop_stream: Callable[[str, int, int, int], None] | None) -> None:
        self.settings = settings
        self.db = db
        self.host = host
        self.directory = directory
        self.live = live
        self.drop_stream = drop_stream
        self._streams_dropped: set[Key] = set()

    def disk_low(self) -> str | None:
        """Why this host takes no work for want of disk, or None."""
        want = self.settings.disk_min_free_bytes
        try:
            free = shutil.disk_usage(self.settings.home).free
        except OSError:
            return None
        if free >= want:
            return None
        return (f"low on disk: {show_size(free)} free under {self.settings.home}, under "
                f"TPUQ_DISK_MIN_FREE_BYTES ({show_size(want)})")

    def run_once(self) -> None:
        cfg = self.settings
        found = scan(self.directory)
        self._streams_dropped &= set(found)  # what is gone from disk needs no memory
        with self.db.read() as s:
            known = logusage.logs_of(s, sorted({k[0] for k in found}))
            now = queries.now(s)
        live = set(self.live())
        keep_s = cfg.log_keep_days * 86400
        usage: dict[str, int] = defaultdict(int)
        ended: dict[str, list[tuple[float, Key]]] = defaultdict(list)
        for key, files in found.items():
            owner, host, ended_at = known.get(key, ("", "", None))
            if not owner:  # no such attempt in this database: by age alone
                if now - files.newest > keep_s:
                    self._remove(key, files, "", "kept past TPUQ_LOG_KEEP_DAYS")
                continue
            if host != self.host:
                continue  # another host's, in a shared state directory: its agent's
            if ended_at is not None and key[:2] not in live:
                if now - ended_at > keep_s:
                    self._remove(key, files, owner, "ended past TPUQ_LOG_KEEP_DAYS")
                    continue
                ended[owner].append((ended_at, key))
            usage[owner] += files.size
        for owner, attempts in ended.items():
            for _, key in sorted(attempts):
                if usage[owner] <= cfg.log_budget_bytes:
                    break
                usage[owner] -= found[key].size
                self._remove(key, found[key], owner, "over TPUQ_LOG_BUDGET_BYTES")
        self._trim_streams(found, known, ended)
        with self.db.write() as s:
            logusage.record(s, self.host, {o: b for o, b in usage.items() if b},
                            cfg.log_budget_bytes)
        self._others(keep_s)

    def _remove(self, key: Key, files: Files, owner: str, why: str) -> None:
        for path in files.paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        files.paths = []
        log.info("job %s attempt %s%s: log removed (%s, %s)", key[0], key[1],
                 f" worker {key[2]}" if key[2] else "", why, show_size(files.size))
        if owner:
            self._drop_streams(key, files, owner)

    def _drop_streams(self, key: Key, files: Files, owner: str) -> None:
        if self.drop_stream is None or key in self._streams_dropped:
            return
        try:
            self.drop_stream(owner, *key)
        except Exception as e:  # noqa: BLE001 - Redis away: the next pass drops them
            log.debug("stream of job %s attempt %s not dropped: %s", key[0], key[1], e)
            return
        self._streams_dropped.add(key)

    def _trim_streams(self, found: dict[Key, Files],
                      known: dict[Key, tuple[str, str, float | None]],
                      ended: dict[str, list[tuple[float, Key]]]) -> None:
        """The ended attempts' streams, newest first, within TPUQ_LOG_STREAM_BUDGET_BYTES
        (each as large as its log, up to what Redis keeps of one)."""
        from tpuq.queue.logstream import MAX_BYTES

        kept = 0
        newest_first = sorted((e for attempts in ended.values() for e in attempts),
                              reverse=True)
        for _, key in newest_first:
            files = found[key]
            if not files.paths:
                continue  # removed above, streams and all
            kept += min(files.log_size, MAX_BYTES)
            if kept > self.settings.log_stream_budget_bytes:
                self._drop_streams(key, files, known[key][0])

    def _others(self, keep_s: float) -> None:
        """Logs of earlier databases (other instance directories): by age alone."""
        import time

        root = os.path.dirname(self.directory)
        try:
            others = [e.path for e in os.scandir(root)
                      if e.is_dir(follow_symlinks=False) and e.path != self.directory]
        except FileNotFoundError:
            return
        for d in others:
            for key, files in scan(d).items():
                if time.time() - files.newest > keep_s:
                    self._remove(key, files, "", "an earlier database's, kept past "
                                 "TPUQ_LOG_KEEP_DAYS")
