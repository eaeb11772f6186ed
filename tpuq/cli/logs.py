"""`tpuq logs ID [-f]`: a job's output, attempt by attempt."""

from __future__ import annotations

import sys
import time

import click

from tpuq.cli import context
from tpuq.cli.errors import UserError


@click.command()
@click.argument("job_id", type=int)
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the job ends.")
@click.option("--attempt", type=int, help="Only this attempt (default: all, newest last).")
def logs(job_id: int, follow: bool, attempt: int | None) -> None:
    """Print a job's output (stdout and stderr together). With -f, follow it live,
    across requeues, until the job ends."""
    from tpuq.state import queries

    cfg = context.settings()
    db = context.database(cfg)
    printed: dict[int, int] = {}  # attempt number -> bytes printed
    while True:
        with db.read() as s:
            job = queries.job(s, job_id)
            if job is None:
                raise UserError(f"job {job_id} does not exist")
            atts = [a for a in queries.attempts_of(s, job_id)
                    if attempt is None or a.number == attempt]
            done = queries.is_terminal(job.state)
        for a in atts:
            if a.log_path:
                _print_new(a.number, a.log_path, printed, many=len(atts) > 1 or follow)
        if not follow or done:
            if not atts and not follow:
                click.echo(f"job {job_id} has not started yet ({job.state})", err=True)
            return
        time.sleep(0.25)  # polling a file is the transport here; nothing to await


def _print_new(number: int, path: str, printed: dict[int, int], many: bool) -> None:
    try:
        with open(path, "rb") as f:
            f.seek(printed.get(number, 0))
            data = f.read()
    except FileNotFoundError:
        return
    if not data:
        return
    if number not in printed and many:
        click.echo(f"==> attempt {number} <==", err=True)
    printed[number] = printed.get(number, 0) + len(data)
    sys.stdout.buffer.write(data)
    sys.stdout.flush()


COMMANDS = [logs]
