"""Tables, ages and times for people."""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from typing import Any

from tpuq.jobjson import epoch
from tpuq.spec import show_duration

duration = show_duration  # ages and runtimes in every table


def ago(t: float | str | None, now: float | None = None) -> str:
    """How long since `t` (epoch seconds, or a job object's ISO time)."""
    t = epoch(t)
    if t is None:
        return "-"
    return duration((now or time.time()) - t)




def clock(t: float | str | None) -> str:
    """`t` (epoch seconds, or a job object's ISO time) as local time."""
    t = epoch(t)
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
