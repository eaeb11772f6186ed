"""What a person submits, checked before anything is written.

Import-light (no SQLAlchemy): the CLI validates here and then either hands the spec to
the local agent over its socket or writes it to the database itself.
"""

from __future__ import annotations

import dataclasses
import signal
from dataclasses import dataclass, field
from typing import Any

SPEC_FIELDS = (
    "command", "cwd", "env", "owner", "team", "name", "priority", "chips", "tpu_type",
    "stop_signal", "grace_s", "time_limit_s", "max_retries", "requeue_on_preempt",
    "tcmalloc", "resubmit_of",
)


class SpecError(ValueError):
    """A user mistake in a job spec; the message is shown as is."""


@dataclass
class JobSpec:
    command: list[str]
    cwd: str
    owner: str
    team: str
    env: dict[str, str] = field(default_factory=dict)
    name: str | None = None
    priority: int = 0
    chips: int | None = None
    tpu_type: str | None = None
    stop_signal: str = "SIGTERM"
    grace_s: float = 30.0
    time_limit_s: float | None = None
    max_retries: int = 0
    requeue_on_preempt: bool = True
    tcmalloc: bool = True
    resubmit_of: int | None = None

    def validate(self) -> JobSpec:
        if not self.command:
            raise SpecError("no command given")
        if self.chips is not None and self.chips < 1:
            raise SpecError(f"--chips must be at least 1, got {self.chips}")
        if self.grace_s < 0:
            raise SpecError("--grace cannot be negative")
        if self.max_retries < 0:
            raise SpecError("--max-retries cannot be negative")
        if self.time_limit_s is not None and self.time_limit_s <= 0:
            raise SpecError("--time must be positive")
        self.stop_signal = signal_name(self.stop_signal)
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobSpec:
        unknown = set(data) - set(SPEC_FIELDS)
        if unknown:
            raise SpecError(f"unknown job fields: {', '.join(sorted(unknown))}")
        return cls(**data).validate()


def signal_name(value: str) -> str:
    """'TERM', 'sigterm', '15' -> 'SIGTERM'; SpecError for anything else."""
    v = value.strip().upper()
    if v.isdigit():
        try:
            return signal.Signals(int(v)).name
        except ValueError:
            raise SpecError(f"unknown signal {value!r}") from None
    if not v.startswith("SIG"):
        v = "SIG" + v
    if v not in signal.Signals.__members__ or v in ("SIGKILL", "SIGSTOP"):
        raise SpecError(f"unknown or uncatchable signal {value!r}")
    return v


def parse_duration(text: str) -> float:
    """'90', '90s', '15m', '2h', '1d', '1h30m' -> seconds."""
    import re

    t = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return float(t)
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhdw])", t)
    if not parts or "".join(a + b for a, b in parts) != t:
        raise SpecError(f"cannot read duration {text!r} (try 30s, 15m, 2h, 1d)")
    unit = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    return sum(float(n) * unit[u] for n, u in parts)
