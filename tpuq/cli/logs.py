"""`tpuq logs ID [-f]`: a job's output, attempt by attempt.

On the job's host (and always in the embedded deployment) the attempt's log file is
read directly. Elsewhere, in the team deployment, the output comes from the Redis
stream the agent ships it to (tpuq/queue/logstream.py).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import click

from tpuq.cli import context
from tpuq.cli.errors import UserError


@click.command()
@click.argument("job_id", type=int)
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the job ends.")
@click.option("--attempt", type=int, help="Only this attempt (default: all, newest last).")
def logs(job_id: int, follow: bool, attempt: int | None) -> None:
    """Print a job's output (stdout and stderr together). With -f, follow it live,
    across requeues, until the job ends. Works from any machine in a team deployment."""
    cfg = context.settings()
    db = context.database(cfg)
    printed: dict[int, int] = {}  # attempt number -> bytes printed (local files)
    finished: set[int] = set()  # attempts read to their end from the stream
    while True:
        job, atts, done = _load(db, job_id, attempt)
        for a in atts:
            header = len(atts) > 1 or follow
            local = cfg.embedded or a.host == cfg.host
            if local and os.path.exists(a.log_path or ""):
                _print_file(a.number, a.log_path, printed, header)
            elif not cfg.embedded and a.number not in finished and a.log_path:
                _print_stream(cfg, db, job_id, a, header, follow)
                finished.add(a.number)
        if not follow or done:
            if not atts and not follow:
                click.echo(f"job {job_id} has not started yet ({job.state})", err=True)
            return
        time.sleep(0.25)  # polling a file is the transport here; nothing to await


def _load(db: Any, job_id: int, attempt: int | None) -> tuple[Any, list[Any], bool]:
    from tpuq.state import queries

    with db.read() as s:
        job = queries.job(s, job_id)
        if job is None:
            raise UserError(f"job {job_id} does not exist")
        atts = [a for a in queries.attempts_of(s, job_id) if attempt is None or a.number == attempt]
        return job, atts, queries.is_terminal(job.state)


def _print_file(number: int, path: str, printed: dict[int, int], header: bool) -> None:
    with open(path, "rb") as f:
        f.seek(printed.get(number, 0))
        data = f.read()
    if not data:
        return
    if number not in printed and header:
        click.echo(f"==> attempt {number} <==", err=True)
    printed[number] = printed.get(number, 0) + len(data)
    sys.stdout.buffer.write(data)
    sys.stdout.flush()


def _print_stream(cfg: Any, db: Any, job_id: int, a: Any, header: bool, follow: bool) -> None:
    """The attempt's output from Redis, with a note wherever Redis no longer has all of it
    (trimmed by the cap, expired, or lost in a Redis restart): the file on the job's host
    always has everything."""
    from tpuq.queue import logstream

    if header:
        click.echo(f"==> attempt {a.number} ({a.host}) <==", err=True)
    where = f"{a.host}:{a.log_path}"
    at = 0  # the file offset the next piece should start at
    for piece in logstream.follow(cfg.broker_url, job_id, a.number, wait=follow):
        if piece is None:  # nothing new: stop if the attempt ended and no end marker comes
            if _attempt_over(db, job_id, a.number):
                break
            continue
        if piece.end:
            return
        data = piece.data
        if piece.offset is not None:
            if piece.offset > at:
                click.echo(f"tpuq: {piece.offset - at} bytes of attempt {a.number}'s output "
                           f"are no longer in Redis; the whole log is {where}", err=True)
            data = data[max(0, at - piece.offset):]  # shipped twice (a lost reply): once
            at = max(at, piece.offset + len(piece.data))
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    if _attempt_over(db, job_id, a.number):  # over, and its end marker is not there
        what = "the end of" if at else "any of"
        click.echo(f"tpuq: {what} attempt {a.number}'s output is not in Redis (its host "
                   f"died, or it expired, or Redis restarted); the whole log is {where}",
                   err=True)


def _attempt_over(db: Any, job_id: int, number: int, settle_s: float = 3.0) -> bool:
    """Ended long enough ago that its agent would have shipped the end marker."""
    from tpuq.state import queries

    with db.read() as s:
        a = next((x for x in queries.attempts_of(s, job_id) if x.number == number), None)
        now = queries.now(s)
    return a is None or (a.ended_at is not None and now - a.ended_at > settle_s)


COMMANDS = [logs]
