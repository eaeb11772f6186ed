"""`tpuq logs ID [-f]`: a job's output, attempt by attempt.

The handler reads it where it is (the job's host's file, or the Redis stream its agent
ships it to: tpuq/api/logs.py) and sends it in chunks; this command prints them, and
with -f asks again until the job ends.
"""

from __future__ import annotations

import base64
import sys
import time
from collections import deque
from typing import Any

import click

from tpuq.cli import context
from tpuq.cli.args import JOB_ID, cancel_on_interrupt_option

FOLLOW_POLL_S = 0.25  # asking again for new output: the file or stream is the transport


@click.command()
@click.argument("job_id", type=JOB_ID)
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the job ends.")
@click.option("--attempt", type=int, help="Only this attempt (default: all, newest last).")
@click.option("--tail", "tail", type=click.IntRange(min=0), metavar="N",
              help="Only the last N lines (then, with -f, what follows).")
@click.option("--worker", "worker", metavar="N|all",
              help="A slice job's worker N (default 0), or every worker's lines prefixed "
                   "[wN].")
@cancel_on_interrupt_option
def logs(job_id: int, follow: bool, attempt: int | None, tail: int | None,
         worker: str | None, cancel_on_interrupt: bool) -> None:
    """Print a job's output (stdout and stderr together); a job run more than once has
    each attempt under a header line. With -f, follow it live, across requeues, until
    the job ends, and exit with its outcome as `tpuq wait` does (0 succeeded, 10 failed,
    11 cancelled, 12 timeout), so `tpuq logs -f 12 && next` works. Works from any machine of the deployment.
    Ctrl-C stops following (exit 130); the job goes on unless --cancel-on-interrupt.

    \b
      tpuq logs 12 --tail 50 -f
    """
    from tpuq.cli.interrupts import interruptible

    if not follow:
        _print(job_id, attempt, tail, worker, follow)
        return
    with interruptible([job_id], cancel=cancel_on_interrupt):
        _print(job_id, attempt, tail, worker, follow)


def _print(job_id: int, attempt: int | None, tail: int | None, worker: str | None,
           follow: bool) -> None:
    from tpuq.protocol import LogChunk, ReadLog

    which = _worker(worker)
    out = _Printer(tail, prefixed=which == -1)
    positions: dict[str, str] = {}
    while True:
        chunk = context.ask(ReadLog(id=job_id, attempt=attempt, positions=positions,
                                    worker=which), LogChunk)
        positions = chunk.positions
        for piece in chunk.pieces:
            out.piece(piece, len(chunk.attempts) > 1)
        for note in chunk.notes:
            click.echo(f"tpuq: {note}", err=True)
        if chunk.pieces:
            continue  # more may be waiting: ask again at once
        if not follow or chunk.ended:
            out.flush_lines()  # a worker's unfinished last line, only once nothing follows
            out.flush_tail()
            break
        out.flush_tail()
        time.sleep(FOLLOW_POLL_S)
    _after(job_id, chunk, out.printed, follow)


def _worker(text: str | None) -> int | None:
    if text is None:
        return None
    if text == "all":
        return -1
    if text.isdigit():
        return int(text)
    raise click.BadParameter(f"{text!r}: a worker number or 'all'", param_hint="'--worker'")


def _after(job_id: int, chunk: Any, printed: set[int], follow: bool) -> None:
    """Say what the output cannot: why an attempt wrote nothing, why the job never ran;
    and with -f, exit with the job's outcome."""
    from tpuq.cli.wait import OUTCOME_EXIT, outcome_exit

    for number, how in sorted(chunk.outcomes.items(), key=lambda kv: int(kv[0])):
        if int(number) not in printed and not how.startswith("succeeded"):
            click.echo(f"tpuq: attempt {number} wrote nothing: {how}", err=True)
    if not chunk.attempts:
        if chunk.state in OUTCOME_EXIT:
            why = f" ({chunk.reason})" if chunk.reason else ""
            click.echo(f"tpuq: job {job_id} never started: {chunk.state}{why}", err=True)
        else:
            click.echo(f"job {job_id} has not started yet ({chunk.state})", err=True)
    if follow or not chunk.attempts:
        code = outcome_exit(chunk.state) if chunk.state in OUTCOME_EXIT else 0
        if code:
            raise SystemExit(code)


class _Printer:
    """Writes pieces with an attempt header before each attempt's first; with a tail,
    holds back all but the last N lines until the output so far is read."""

    def __init__(self, tail: int | None, prefixed: bool = False) -> None:
        self.tail: deque[bytes] | None = deque(maxlen=tail) if tail is not None else None
        self.printed: set[int] = set()
        self.told: set[tuple[int, int | None]] = set()  # (attempt, worker) read from a stream
        self.partial = b""
        self.prefixed = prefixed  # every worker's lines, each marked [wN]
        self.lines: dict[int, bytes] = {}  # worker -> its unfinished line

    def piece(self, piece: dict[str, Any], header: bool) -> None:
        number = piece["attempt"]
        data = base64.b64decode(piece["data"])
        where = f" ({piece['host']})" if piece["source"] == "stream" else ""
        source = (number, piece.get("worker"))
        if where and source not in self.told:
            self.told.add(source)
            click.echo(f"tpuq: attempt {number}'s output comes from {piece['host']}'s log "
                       "stream", err=True)
        if header and number not in self.printed:
            self._write(f"==> attempt {number}{where} <==\n".encode())
        self.printed.add(number)
        if self.prefixed and "worker" in piece:
            w = int(piece["worker"])
            *done, self.lines[w] = (self.lines.get(w, b"") + data).split(b"\n")
            data = b"".join(f"[w{w}] ".encode() + line + b"\n" for line in done)
        self._write(data)

    def flush_lines(self) -> None:
        """The workers' unfinished last lines, once what there is has been read."""
        for w, rest in sorted(self.lines.items()):
            if rest:
                self._write(f"[w{w}] ".encode() + rest + b"\n")
        self.lines = {}

    def _write(self, data: bytes) -> None:
        if self.tail is None:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
            return
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        self.tail.extend(line + b"\n" for line in lines)

    def flush_tail(self) -> None:
        if self.tail is None:
            return
        sys.stdout.buffer.write(b"".join(self.tail) + self.partial)
        sys.stdout.flush()
        self.tail, self.partial = None, b""


COMMANDS = [logs]
