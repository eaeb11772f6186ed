"""How an attempt ended, and recording it: the same rules whoever records it (the
supervisor in the agent, or a keeper whose agent is away, or an agent collecting what
ended while it was down)."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from tpuq.agent import exits
from tpuq.state import attempts
from tpuq.state.attempts import Ending
from tpuq.state.db import Database
from tpuq.state.states import Outcome

PROGRESS_TAIL = 64 * 1024  # the last progress line is in here; the rest is history
UNATTENDED_GIVE_UP_S = 600.0


def progress_path(log_path: str) -> str:
    """Where tpuq.job.checkpointed() reports steps (TPUQ_PROGRESS_FILE)."""
    return log_path + ".progress"


def exit_path(log_path: str) -> str:
    """Where the keeper writes how the attempt ended."""
    return log_path + ".exit"


def natural_ending(ex: exits.Exit, log_path: str,
                   on_busy: Callable[[str], None] = lambda _: None) -> Ending:
    """How an attempt ended by itself; a stop request overrides it in the database."""
    if ex.succeeded:
        return Ending(Outcome.SUCCEEDED, ex.words, ex.code, ex.signal)
    if ex.code == exits.EX_TEMPFAIL:
        return Ending(Outcome.REQUEUED, f"{ex.words} (EX_TEMPFAIL: job asked to be requeued)",
                      ex.code, ex.signal)
    busy = exits.tpu_busy_message(exits.read_tail(log_path))
    if busy:
        on_busy(busy)
        return Ending(Outcome.HOST_ERROR, f"TPU busy: {busy.strip()}", ex.code, ex.signal)
    return Ending(Outcome.FAILED, ex.words, ex.code, ex.signal)


def ending_of(ended: dict[str, Any], log_path: str,
              on_busy: Callable[[str], None] = lambda _: None) -> Ending:
    """The Ending a keeper's report (or exit file) means."""
    if ended.get("error"):
        kind = Outcome.HOST_ERROR if ended.get("host_error") else Outcome.FAILED
        return Ending(kind, str(ended["error"]))
    if ended.get("fenced"):
        return Ending(Outcome.LOST, "stopped by its keeper: the lease was not renewed in time",
                      ended.get("code"), ended.get("signal"))
    end = natural_ending(exits.Exit(ended.get("code"), ended.get("signal")), log_path, on_busy)
    if ended.get("signalled") is False:  # an older keeper's file says nothing: not untouched
        return dataclasses.replace(end, untouched=True)
    return end


def read_exit(log_path: str) -> dict[str, Any] | None:
    """A keeper's exit record of the attempt whose log this is, if it wrote one."""
    try:
        with open(exit_path(log_path)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def record(db: Database, job_id: int, attempt: int, host: str, end: Ending, *,
           progress: Progress | None, retry_backoff_s: float,
           checkpoint_seen: bool = False) -> Ending | None:
    """One transaction: the last reported step (and that the host-local checkpoint
    directory holds something), then the end (fenced: nothing changes). The ending as
    recorded (a stop request decides how the attempt counts), or None when the attempt
    was no longer this host's to end."""
    with db.write() as s:
        if progress is not None:
            attempts.record_progress(s, job_id, attempt, *progress)
        if checkpoint_seen:
            attempts.checkpoint_seen(s, job_id, attempt)
        done = attempts.finish_recorded(s, job_id, attempt, host, end,
                                        retry_backoff_s=retry_backoff_s)
    return None if done is None else done[1]


def words(end: Ending) -> str:
    """An ending as the agent's log says it: outcome (exit status): reason."""
    status = f"exit {end.exit_code}" if end.exit_code is not None else \
        f"signal {end.exit_signal}" if end.exit_signal is not None else "no exit status"
    return f"{end.outcome.value} ({status}): {end.reason}"


def record_unattended(job_id: int, attempt: int, host: str, log_path: str,
                      ended: dict[str, Any]) -> None:
    """A keeper's last act when no agent collected its attempt (settings as the agent's,
    from the environment the keeper server was started with)."""
    from tpuq import settings as settings_mod
    from tpuq.state.db import Database
    from tpuq.state.outage import until_written

    cfg = settings_mod.load()
    db = Database(cfg.db_url)
    end = ending_of(ended, log_path)
    progress = last_progress(progress_path(log_path))
    give_up = threading.Event()  # a database away this long: the exit file waits for an agent
    timer = threading.Timer(UNATTENDED_GIVE_UP_S, give_up.set)
    timer.daemon = True
    timer.start()
    try:
        until_written(lambda: record(db, job_id, attempt, host, end, progress=progress,
                                     retry_backoff_s=cfg.retry_backoff_s),
                      f"recording the end of job {job_id}", max_wait_s=2.0, give_up=give_up)
    finally:
        timer.cancel()
        db.dispose()


class Progress(NamedTuple):
    """The last step a job reported, when, the total it gave (if any) and when it
    should reach that total at the rate of its reports still in the file's tail."""

    step: int
    at: float
    total: int | None = None
    eta_at: float | None = None


def progress_of(records: list[tuple[int, float, int | None]]) -> Progress | None:
    """From the (step, time, total) reports in file order: the last, and an ETA from the
    oldest one of this attempt's run that is before it (the rate since then)."""
    if not records:
        return None
    step, at, total = records[-1]
    eta = None
    if total is not None and total > step:
        first = next(((s, t) for s, t, _ in records if s < step and t < at), None)
        if first is not None:
            rate = (step - first[0]) / (at - first[1])
            eta = at + (total - step) / rate
    return Progress(step, at, total, eta)


def last_progress(path: str) -> Progress | None:
    """The last step the job reported through tpuq.job.checkpointed().

    The job writes this file (as its owner, under TPUQ_RUN_AS=owner): read only its
    tail, never through a symlink, and let nothing written in it break the agent.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        f.seek(max(0, st.st_size - PROGRESS_TAIL))
        lines = f.read(PROGRESS_TAIL).splitlines()
    records = []
    for line in lines:
        try:
            rec = json.loads(line)
            total = rec.get("total")
            records.append((int(rec["step"]), float(rec["time"]),
                            None if total is None else int(total)))
        except (ValueError, KeyError, TypeError, IndexError, AttributeError,
                RecursionError, OverflowError):
            continue
    try:
        return progress_of(records)
    except (ArithmeticError, ValueError):
        return Progress(*records[-1])
