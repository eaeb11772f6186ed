"""`tpuq logs ID [-f]`: a job's output, attempt by attempt.

The handler reads it where it is (the job's host's file, or the Redis stream its agent
ships it to: tpuq/api/logs.py) and sends it in chunks; this command prints them, and
with -f asks again until the job ends.
"""

from __future__ import annotations

import base64
import sys
import time

import click

from tpuq.cli import context
from tpuq.cli.args import JOB_ID

FOLLOW_POLL_S = 0.25  # asking again for new output: the file or stream is the transport


@click.command()
@click.argument("job_id", type=JOB_ID)
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the job ends.")
@click.option("--attempt", type=int, help="Only this attempt (default: all, newest last).")
def logs(job_id: int, follow: bool, attempt: int | None) -> None:
    """Print a job's output (stdout and stderr together). With -f, follow it live,
    across requeues, until the job ends, and exit with its outcome as `tpuq wait` does
    (0 succeeded, 10 failed, 11 cancelled, 12 timeout), so `tpuq logs -f 12 && next`
    works. Works from any machine of the deployment."""
    from tpuq.protocol import LogChunk, ReadLog

    positions: dict[str, str] = {}
    headed: set[int] = set()
    while True:
        chunk = context.ask(ReadLog(id=job_id, attempt=attempt, positions=positions), LogChunk)
        positions = chunk.positions
        header = len(chunk.attempts) > 1 or follow
        for piece in chunk.pieces:
            number = piece["attempt"]
            if header and number not in headed:
                where = f" ({piece['host']})" if piece["source"] == "stream" else ""
                click.echo(f"==> attempt {number}{where} <==", err=True)
                headed.add(number)
            sys.stdout.buffer.write(base64.b64decode(piece["data"]))
            sys.stdout.flush()
        for note in chunk.notes:
            click.echo(f"tpuq: {note}", err=True)
        if chunk.pieces:
            continue  # more may be waiting: ask again at once
        if not chunk.attempts and not follow:
            click.echo(f"job {job_id} has not started yet ({chunk.state})", err=True)
        if follow and chunk.ended:
            from tpuq.cli.wait import outcome_exit

            code = outcome_exit(chunk.state)
            if code:
                raise SystemExit(code)
            return
        if not follow:
            return
        time.sleep(FOLLOW_POLL_S)


COMMANDS = [logs]
