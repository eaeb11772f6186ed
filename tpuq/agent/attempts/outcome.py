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
from typing import NamedTuple

from tpuq.agent import exits
from tpuq.agent.keeper.messages import Ended, MessageError, decode_as
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


# Who holds the chips after a start-up failure that said the TPU was busy: a description
# (the host is then busy) or None (nobody: the failure is not "busy"). The supervisor
# scans the attempt's chips (executor.tpu_busy); elsewhere nothing can scan.
BusyCheck = Callable[[str], "str | None"]


def _no_scan(_: str) -> str | None:
    return None


def natural_ending(ex: exits.Exit, log_path: str, busy_check: BusyCheck = _no_scan) -> Ending:
    """How an attempt ended by itself; a stop request overrides it in the database.

    A TPU that did not start is a host error (requeued, uncharged, and capped: after
    TPUQ_HOST_ERROR_RETRIES in a row the job fails, state/attempts.py), with the
    runtime's own words and a hint. It is "TPU busy" only when a holder is found."""
    if ex.succeeded:
        return Ending(Outcome.SUCCEEDED, ex.words, ex.code, ex.signal)
    if ex.code == exits.EX_TEMPFAIL:
        return Ending(Outcome.REQUEUED, f"{ex.words} (EX_TEMPFAIL: job asked to be requeued)",
                      ex.code, ex.signal)
    failed = exits.startup_failure(exits.read_tail(log_path))
    if failed is None:
        return Ending(Outcome.FAILED, ex.words, ex.code, ex.signal)
    holder = busy_check(failed.message) if failed.busy else None
    if holder:
        why = f"TPU busy: {failed.message} ({holder})"
    elif failed.busy:
        why = (f"TPU did not start: {failed.message}; no process holds its chips now "
               "(a stale libtpu lock, removed before the next job, or a holder gone since)")
    else:
        why = f"TPU did not start: {failed.message} (hint: {failed.hint})"
    return Ending(Outcome.HOST_ERROR, why, ex.code, ex.signal)


# What the platform's own SIGTERM may have ended (TPU Autocheckpoint, a spot VM reclaimed):
# the job's work is not done whatever it exited with, so it is requeued as preempted.
UNDER_NOTICE = frozenset({Outcome.SUCCEEDED, Outcome.FAILED, Outcome.REQUEUED})


def under_notice(end: Ending, notice: str | None) -> Ending:
    """`end` of an attempt the agent sent no stop, while `notice` (a preemption or
    maintenance notice for its host) stood: preempted, whatever its exit status."""
    if notice is None or end.outcome not in UNDER_NOTICE:
        return end
    return Ending(Outcome.PREEMPTED, f"ended under a platform notice ({notice}): {end.reason}",
                  end.exit_code, end.exit_signal)


def ending_of(ended: Ended, log_path: str, busy_check: BusyCheck = _no_scan) -> Ending:
    """The Ending a keeper's report (or exit file) means."""
    if ended.error:
        kind = Outcome.HOST_ERROR if ended.host_error else Outcome.FAILED
        return Ending(kind, ended.error)
    if ended.fenced:
        return Ending(Outcome.LOST, "stopped by its keeper: the lease was not renewed in time",
                      ended.code, ended.signal)
    end = natural_ending(exits.Exit(ended.code, ended.signal), log_path, busy_check)
    if ended.signalled is False:  # None: an older keeper did not say; not untouched then
        return dataclasses.replace(end, untouched=True)
    return end


def read_exit(log_path: str) -> Ended | None:
    """A keeper's exit record of the attempt whose log this is, if it wrote one (and in
    a version this agent reads)."""
    try:
        with open(exit_path(log_path), "rb") as f:
            return decode_as(Ended, f.read())
    except (OSError, MessageError):
        return None


def record(db: Database, job_id: int, attempt: int, host: str, end: Ending, *,
           progress: Progress | None, retry_backoff_s: float,
           host_retries: int = attempts.HOST_RETRIES,
           checkpoint_seen: bool = False,
           process: tuple[int, int | None] | None = None) -> Ending | None:
    """One transaction: the last reported step (and that the host-local checkpoint
    directory holds something), then the end (fenced: nothing changes), with the job's
    process if it ended before it was recorded (`process`: pid, start ticks). The ending
    as recorded (a stop request decides how the attempt counts), or None when the
    attempt was no longer this host's to end."""
    if end.outcome is Outcome.SUCCEEDED and not checkpoint_seen:
        # the commonest end, in one statement while the job runs (no stop asked)
        with db.single() as s:
            if attempts.finish_running_success(s, job_id, attempt, host, end,
                                               process=process, progress=progress):
                return end
    with db.write() as s:
        if progress is not None:
            attempts.record_progress(s, job_id, attempt, *progress)
        if checkpoint_seen:
            attempts.checkpoint_seen(s, job_id, attempt)
        done = attempts.finish_recorded(s, job_id, attempt, host, end,
                                        retry_backoff_s=retry_backoff_s,
                                        host_retries=host_retries, process=process)
    return None if done is None else done[1]


def words(end: Ending) -> str:
    """An ending as the agent's log says it: outcome (exit status): reason."""
    status = f"exit {end.exit_code}" if end.exit_code is not None else \
        f"signal {end.exit_signal}" if end.exit_signal is not None else "no exit status"
    return f"{end.outcome.value} ({status}): {end.reason}"


def record_unattended(job_id: int, attempt: int, host: str, log_path: str,
                      ended: Ended) -> None:
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
                                     retry_backoff_s=cfg.retry_backoff_s,
                                     host_retries=cfg.host_error_retries),
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
            if not eta - at <= MAX_ETA_S:  # inf and NaN too: no date anyone can show
                eta = None
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
    records = [r for r in map(_report, lines) if r is not None]
    try:
        return progress_of(records)
    except (ArithmeticError, ValueError):
        return Progress(*records[-1])


# What a report may say and still reach the database and every user's `status`: steps
# and totals that fit a BIGINT, times that are finite dates (an infinite one made the
# agent's status replies unreadable JSON, for everyone).
MAX_COUNT = 2**63 - 1
LATEST_TIME = 1e11  # the year 5138: a clock or a job that says later is wrong
MAX_ETA_S = 100 * 365 * 86400.0


def _report(line: bytes) -> tuple[int, float, int | None] | None:
    """One line of the progress file as (step, time, total), or None if it is not one."""
    try:
        rec = json.loads(line)
        step, at, total = rec["step"], rec["time"], rec.get("total")
        if not _count(step) or (total is not None and not _count(total)):
            return None
        at = float(at)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError,
            RecursionError, OverflowError):
        return None
    if not 0 <= at < LATEST_TIME:  # NaN fails too
        return None
    return step, at, total


def _count(value: object) -> bool:
    return type(value) is int and 0 <= value <= MAX_COUNT
