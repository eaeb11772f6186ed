"""Tables, ages and job objects for people and for --json."""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from typing import Any

from tpuq.spec import show_duration

duration = show_duration  # ages and runtimes in every table


def ago(t: float | None, now: float | None = None) -> str:
    if t is None:
        return "-"
    return duration((now or time.time()) - t)




def clock(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], max_last: int = 60) -> str:
    # one line per row: a multi-line `python -c '...'` command must not break the table
    cells = [[" ".join(str(c).split()) for c in r] for r in rows]
    for r in cells:
        if r and len(r[-1]) > max_last:
            r[-1] = r[-1][: max_last - 1] + "…"
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    for r in cells:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines)


def command_words(command: Sequence[str]) -> str:
    return " ".join(shlex.quote(c) for c in command)


def job_object(job: Any, waiting: str | None = None) -> dict[str, Any]:
    """The stable JSON shape of a job (README documents these keys)."""
    return {
        "id": job.id, "name": job.name, "state": job.state, "attempts": job.attempt,
        "host": job.host, "exit_code": job.exit_code, "exit_signal": job.exit_signal,
        "command": list(job.command), "cwd": job.cwd, "owner": job.owner, "team": job.team,
        "chips": job.chips, "tpu_type": job.tpu_type, "priority": job.priority,
        "preemptions": job.preemptions, "failures": job.failures,
        "max_retries": job.max_retries, "submitted_at": job.submitted_at,
        "ended_at": job.ended_at, "reason": job.reason, "waiting_for": waiting,
        "resubmit_of": job.resubmit_of,
    }
