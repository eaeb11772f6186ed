"""`--begin TIME`: when a job may start, read as SLURM's `sbatch --begin` reads it.

`22:00` (today, or tomorrow once past), `+2h` or `now+90m` (from now), `2026-12-01`
(midnight) or `2026-12-01T06:30` / `2026-12-01 06:30` (ISO; an offset such as `+02:00`
is honoured), `midnight`, `noon`, `tomorrow`. Local time of the submitting shell (TZ).
Stdlib only: the CLI parses here, before any connection.
"""

from __future__ import annotations

import datetime as dt
import re

from tpuq.spec import SpecError, parse_duration

_CLOCK = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?\Z")
_NAMED = {"midnight": (0, 0), "noon": (12, 0), "teatime": (16, 0)}
HINT = "e.g. 22:00, +2h, now+30m, 2026-12-01T06:30, midnight, tomorrow"


def parse(text: str, now: float) -> float:
    """Epoch seconds of `text` as seen at `now` (epoch seconds); SpecError otherwise."""
    t = text.strip().lower()
    if not t or len(t) > 64:
        raise SpecError(f"--begin {text!r}: {HINT}")
    if t == "now":
        return now
    if t.startswith(("+", "now+")):
        try:
            return now + parse_duration(t.split("+", 1)[1])
        except SpecError:
            raise SpecError(f"--begin {text!r}: {HINT}") from None
    local = dt.datetime.fromtimestamp(now).astimezone()
    if t in ("today", "tomorrow"):
        day = local.replace(hour=0, minute=0, second=0, microsecond=0)
        return (day + dt.timedelta(days=t == "tomorrow")).timestamp()
    named = _NAMED.get(t)
    m = _CLOCK.match(t)
    if named is not None or m:
        hour, minute = named or (int(m.group(1)), int(m.group(2)))  # type: ignore[union-attr]
        second = int(m.group(3) or 0) if m else 0
        if hour > 23 or minute > 59 or second > 59:
            raise SpecError(f"--begin {text!r}: not a time of day")
        at = local.replace(hour=hour, minute=minute, second=second, microsecond=0)
        if at.timestamp() <= now:  # past today: the next such time (SLURM's rule)
            at = _next_day(at)
        return at.timestamp()
    try:
        when = dt.datetime.fromisoformat(text.strip().upper().replace("Z", "+00:00"))
    except ValueError:
        raise SpecError(f"--begin {text!r}: {HINT}") from None
    if when.tzinfo is None:
        when = when.astimezone()  # a naive time is local time
    return when.timestamp()


def _next_day(at: dt.datetime) -> dt.datetime:
    """The same wall-clock time a day later (through a DST change too)."""
    naive = at.replace(tzinfo=None) + dt.timedelta(days=1)
    return naive.astimezone()
