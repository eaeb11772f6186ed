"""What a person submits, and the one function that checks it.

Every way a job enters the queue (the agent's socket, a direct database write, a
resubmit, the Python client) ends in `state.jobs.submit`, which calls `JobSpec.validate`
before anything is written; database CHECK constraints (migrations/) back it as the
last line. A bad spec is one line for the user (SpecError); the scheduler never sees it.

Import-light (no SQLAlchemy): the CLI validates here first, so a mistake is reported
before any connection is made.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence

from tpuq.errors import TpuqError
from tpuq.records import Record, field
from tpuq.settings import Settings
from tpuq.shapes import canonical, slice_hosts

TYPE_CHECKING = False  # typing costs an import; the type checker reads this as True
if TYPE_CHECKING:
    from typing import Any

SPEC_FIELDS = (
    "command", "cwd", "env", "owner", "team", "name", "priority", "chips", "tpu_type",
    "stop_signal", "grace_s", "time_limit_s", "max_retries", "requeue_on_preempt",
    "tcmalloc", "resubmit_of", "notify", "notify_to", "env_dropped", "begin_at", "output",
    "option_sources", "session",
)
# fields sent only when set: an agent of the release before them still takes the spec
LATER_FIELDS = ("begin_at", "output", "option_sources", "session")

# What fits the columns (state/models.py) and what a sane job asks for.
MAX_NAME = 200
MAX_USER = 64  # owner, team
MAX_TPU_TYPE = 32
MAX_ARGS = 4096
MAX_ARG = 128 * 1024
MAX_COMMAND = 1024 * 1024
MAX_PATH = 4096
MAX_ENV_VARS = 4096
MAX_ENV_NAME = 256
MAX_ENV = 1024 * 1024
MAX_PRIORITY = 1_000_000
MAX_CHIPS = 4096
MAX_GRACE_S = 7 * 86400.0
MAX_TIME_LIMIT_S = 366 * 86400.0
MAX_RETRIES = 100
MAX_ID = 2**63 - 1
# what a job's owner may hear of: `end` (any end), `fail` (failed or timed out),
# `preempt` (preempted more than TPUQ_NOTIFY_PREEMPTS times, told once)
# `start` (each attempt that starts running): only when named, `all` is what became of it
NOTIFY_EVENTS = ("end", "fail", "preempt", "start")
NOTIFY_ALL = ("end", "fail", "preempt")
MAX_NOTIFY_URLS = 16
MAX_NOTIFY_URL = 2048
_NOTIFY_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+\Z")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TEAM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_TPU_TYPE = re.compile(r"[a-z0-9][a-z0-9-]*\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class SpecError(TpuqError, ValueError):
    """A user mistake in a job spec; the message is shown as is."""


def _default_grace() -> float:
    return Settings().default_grace_s


class JobSpec(Record):
    """What a job asks for; every way into the queue calls `validate` first."""

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
    grace_s: float = field(default_factory=_default_grace)  # Settings.default_grace_s
    time_limit_s: float | None = None
    max_retries: int = 0
    requeue_on_preempt: bool = True
    tcmalloc: bool = True
    resubmit_of: int | None = None
    notify: str | None = None  # NOTIFY_EVENTS, comma separated
    notify_to: str | None = None  # Apprise URLs, one per line
    # TPU variables of the submitter's shell tpuq sets or clears (jobenv.dropped)
    env_dropped: list[str] | None = None
    begin_at: float | None = None  # --begin: not started before (epoch seconds)
    output: str | None = None  # --output: also written here, as its owner (outputs.py)
    option_sources: dict[str, str] | None = None  # option -> where it came from
    # an interactive session (`tpuq run`): it starts only on its caller's terminal
    session: bool = False

    def validate(self) -> JobSpec:
        """Check every field's type, range and length; SpecError says what is wrong."""
        self.command = _command(self.command)
        self.cwd = _text(self.cwd, "cwd", MAX_PATH, nul_only=True)
        if not self.cwd.startswith("/"):
            raise SpecError(f"cwd must be an absolute path, got {_shown(self.cwd)}")
        self.env = _env(self.env)
        self.owner = _text(self.owner, "owner", MAX_USER)
        self.team = _text(self.team, "--team", MAX_USER)
        if not _TEAM.match(self.team):
            raise SpecError(f"--team {_shown(self.team)}: letters, digits, '.', '_' and '-' only")
        if self.name is not None:
            self.name = _text(self.name, "--name", MAX_NAME)
        self.priority = _int(self.priority, "--priority", -MAX_PRIORITY, MAX_PRIORITY)
        if self.chips is not None:
            if _is_int(self.chips) and self.chips < 1:
                raise SpecError(f"--chips must be at least 1, got {self.chips}")
            self.chips = _int(self.chips, "--chips", 1, MAX_CHIPS)
        if self.tpu_type is not None:
            self.tpu_type = _text(self.tpu_type, "--tpu-type", MAX_TPU_TYPE)
            if not _TPU_TYPE.match(self.tpu_type):
                raise SpecError(f"--tpu-type {_shown(self.tpu_type)}: e.g. v4-8, v5litepod-16")
            self.tpu_type = canonical(self.tpu_type)  # v5e-8 is v5litepod-8
            if self.workers is not None and self.chips is not None:
                raise SpecError(f"a {self.tpu_type} job runs on every chip of each of its "
                                f"{self.workers} workers; --chips is for single-host types")
        if not isinstance(self.stop_signal, str):
            raise SpecError("--signal must be a signal name")
        self.stop_signal = signal_name(self.stop_signal)
        self.grace_s = _seconds(self.grace_s, "--grace", 0.0, MAX_GRACE_S)
        if self.time_limit_s is not None:
            self.time_limit_s = _seconds(self.time_limit_s, "--time", 0.0, MAX_TIME_LIMIT_S)
            if self.time_limit_s <= 0:
                raise SpecError("--time must be positive")
        self.max_retries = _int(self.max_retries, "--max-retries", 0, MAX_RETRIES)
        for flag in ("requeue_on_preempt", "tcmalloc", "session"):
            if not isinstance(getattr(self, flag), bool):
                raise SpecError(f"{flag} must be true or false")
        if self.session and self.workers is not None:
            raise SpecError(f"a session runs on one host; {self.tpu_type} is a slice of "
                            f"{self.workers} workers (use `tpuq submit`)")
        if self.resubmit_of is not None:
            self.resubmit_of = _int(self.resubmit_of, "resubmit_of", 1, MAX_ID)
        self.notify, self.notify_to = notify_fields(self.notify, self.notify_to)
        self.env_dropped = _names(self.env_dropped)
        if self.begin_at is not None:
            self.begin_at = _seconds(self.begin_at, "--begin", 0.0, MAX_EPOCH)
        if self.output is not None:
            from tpuq.outputs import template_error

            self.output = _text(self.output, "--output", MAX_PATH)
            wrong = template_error(self.output)
            if wrong:
                raise SpecError(wrong)
        self.option_sources = _sources(self.option_sources)
        return self

    @staticmethod
    def check_command(words: Any) -> list[str]:
        """The check `validate` makes of a command (for the tasks of an array)."""
        return _command(words)

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data, lists and maps copied (what dataclasses.asdict gives for
        these fields, whose items are text, without its deep copy: an array of 10,000
        tasks spent most of its submission there); the later fields only when set."""
        out = {f: _copied(getattr(self, f)) for f in SPEC_FIELDS}
        for name in LATER_FIELDS:
            if out[name] is None or out[name] is False:
                del out[name]
        return out

    @property
    def workers(self) -> int | None:
        """Workers of a multi-host slice type (v4-32: 4): a slice job runs one task on
        each; None for a single-host job."""
        n = slice_hosts(self.tpu_type) if self.tpu_type else 0
        return n if n > 1 else None

    @classmethod
    def from_dict(cls, data: Any) -> JobSpec:
        """A spec from untrusted data (a request, a database row), validated."""
        if not isinstance(data, dict):
            raise SpecError("a job spec is an object of fields")
        unknown = set(data) - set(SPEC_FIELDS)
        if unknown:
            raise SpecError(f"unknown job fields: {', '.join(sorted(map(_shown, unknown)))}")
        missing = {"command", "cwd", "owner", "team"} - set(data)
        if missing:
            raise SpecError(f"missing job fields: {', '.join(sorted(missing))}")
        return cls(**data).validate()


def _copied(value: Any) -> Any:
    if isinstance(value, list):
        return [v if isinstance(v, str) else _copied(v) for v in value]
    if isinstance(value, dict):
        return {k: v if isinstance(v, str) else _copied(v) for k, v in value.items()}
    return value


def _shown(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int(value: Any, what: str, lo: int, hi: int) -> int:
    if not _is_int(value):
        raise SpecError(f"{what} must be a whole number, got {_shown(value)}")
    if not lo <= value <= hi:
        raise SpecError(f"{what} must be between {lo} and {hi}, got {value}")
    return int(value)


def _seconds(value: Any, what: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpecError(f"{what} must be a finite number of seconds, got {_shown(value)}")
    if value < lo:
        raise SpecError(f"{what} cannot be negative")
    if value > hi:
        raise SpecError(f"{what} must be at most {hi:g} seconds, got {value:g}")
    return float(value)


def _text(value: Any, what: str, limit: int, nul_only: bool = False) -> str:
    if not isinstance(value, str):
        raise SpecError(f"{what} must be text, got {_shown(value)}")
    if not value:
        raise SpecError(f"{what} cannot be empty")
    if len(value) > limit:
        raise SpecError(f"{what} is {len(value)} characters long; at most {limit}")
    bad = "\x00" in value if nul_only else _CONTROL.search(value) is not None
    if bad:
        raise SpecError(f"{what} {_shown(value)} contains control characters")
    return value


def _command(value: Any) -> list[str]:
    if not isinstance(value, list) or not value:
        raise SpecError("no command given" if value in ([], None) else
                        f"a command is a list of words, got {_shown(value)}")
    if len(value) > MAX_ARGS:
        raise SpecError(f"the command has {len(value)} words; at most {MAX_ARGS}")
    total = 0
    for word in value:
        if not isinstance(word, str):
            raise SpecError(f"every word of a command is text, got {_shown(word)}")
        if "\x00" in word:
            raise SpecError("a command word contains a NUL character")
        if len(word) > MAX_ARG:
            raise SpecError(f"a command word is {len(word)} characters long; at most {MAX_ARG}")
        total += len(word)
    if total > MAX_COMMAND:
        raise SpecError(f"the command is {total} characters long; at most {MAX_COMMAND}")
    if not value[0]:
        raise SpecError("the command's program is empty")
    return list(value)


def _env(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise SpecError(f"env is a map of names to text, got {_shown(value)}")
    if len(value) > MAX_ENV_VARS:
        raise SpecError(f"{len(value)} environment variables; at most {MAX_ENV_VARS}")
    if _env_fine(value):
        return dict(value)
    total = 0  # something is wrong: find what, to say it
    for name, val in value.items():
        if not isinstance(name, str) or len(name) > MAX_ENV_NAME or not _ENV_NAME.match(name):
            raise SpecError(f"bad environment variable name {_shown(name)}")
        if not isinstance(val, str):
            raise SpecError(f"environment variable {name} must be text, got {_shown(val)}")
        if "\x00" in val:
            raise SpecError(f"environment variable {name} contains a NUL character")
        total += len(name) + len(val)
    if total > MAX_ENV:
        raise SpecError(f"the environment is {total} characters; at most {MAX_ENV}")
    return dict(value)


_ENV_NAMES = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]{0,%s}\n)*\Z".replace("%s", str(MAX_ENV_NAME - 1)))


def _env_fine(value: dict[Any, Any]) -> bool:
    """The checks of `_env` at once, in C (a batch submit validates thousands)."""
    if not all(type(k) is str and type(v) is str for k, v in value.items()):
        return False
    names, values = "\n".join(value) + "\n", "".join(value.values())
    return names.count("\n") == len(value) and _ENV_NAMES.match(names) is not None \
        and "\x00" not in values \
        and len(names) - len(value) + len(values) <= MAX_ENV


MAX_DROPPED = 64
MAX_EPOCH = 2.0**36  # year 4147: a --begin time, in epoch seconds
# where a submit option came from, as `show` says it
SOURCES = ("#TPUQ", "command line", "environment")
_OPTION = re.compile(r"--[a-z][a-z-]{0,30}\Z")


def _sources(value: Any) -> dict[str, str] | None:
    """option -> one of SOURCES (a few dozen at most), or None."""
    if value is None or value == {}:
        return None
    if not isinstance(value, dict) or len(value) > 64 or not all(
            isinstance(k, str) and _OPTION.match(k) and v in SOURCES
            for k, v in value.items()):
        raise SpecError("option_sources maps option names (--chips) to one of "
                        + ", ".join(SOURCES))
    return dict(sorted(value.items()))


def _names(value: Any) -> list[str] | None:
    """A short list of environment variable names (env_dropped), or None."""
    if value is None or value == []:
        return None
    if not isinstance(value, list) or len(value) > MAX_DROPPED or not all(
            isinstance(n, str) and len(n) <= MAX_ENV_NAME and _ENV_NAME.match(n) for n in value):
        raise SpecError(f"env_dropped is a list of at most {MAX_DROPPED} variable names")
    return sorted(set(value))


def notify_asked(events: str | None, urls: Sequence[str], cfg: Settings
                 ) -> tuple[str | None, str | None]:
    """What a submit asks (--notify, --notify-to), each falling back to the submitter's
    configured default (Settings.notify, .notify_to); notify_fields checks them."""
    return (events if events is not None else (cfg.notify or None),
            "\n".join(urls) if urls else (cfg.notify_to or None))


def notify_fields(events: Any, urls: Any) -> tuple[str | None, str | None]:
    """(events, URLs) in their stored form: events from NOTIFY_EVENTS, sorted and comma
    joined; URLs one per line. A destination without events means `end`; events without
    a destination, or a word that is neither, is a SpecError."""
    if urls is not None and not isinstance(urls, str):
        raise SpecError("--notify-to must be text")
    found = (urls or "").split()
    if len(found) > MAX_NOTIFY_URLS:
        raise SpecError(f"{len(found)} --notify-to destinations; at most {MAX_NOTIFY_URLS}")
    for url in found:
        if len(url) > MAX_NOTIFY_URL or not _NOTIFY_URL.match(url) or _CONTROL.search(url):
            raise SpecError(f"--notify-to {_shown(url)}: a notification URL such as "
                            "mailto://user:password@example.org, json://host/path, "
                            "slack://TokenA/TokenB/TokenC (see the README)")
    if events is not None and not isinstance(events, str):
        raise SpecError("--notify must be text")
    words = {w.strip().lower() for w in (events or "").split(",") if w.strip()}
    if words == {"none"}:
        return None, None
    if "all" in words:
        words = (words - {"all"}) | set(NOTIFY_ALL)
    unknown = sorted(words - set(NOTIFY_EVENTS))
    if unknown:
        raise SpecError(f"--notify {_shown(unknown[0])}: one or more of "
                        f"{', '.join(NOTIFY_EVENTS)}, or all, or none")
    if not found:
        if words:
            raise SpecError(f"--notify {','.join(sorted(words))}: to where? Give "
                            "--notify-to URL, or notify_to in the config file")
        return None, None
    return ",".join(w for w in NOTIFY_EVENTS if w in (words or {"end"})), "\n".join(found)


def check_update(priority: Any, time_limit_s: Any, begin_at: Any = None) -> None:
    """The fields `tpuq update` may change, checked as a submit checks them."""
    if begin_at is not None:
        _seconds(begin_at, "--begin", 0.0, MAX_EPOCH)
    if priority is not None:
        _int(priority, "--priority", -MAX_PRIORITY, MAX_PRIORITY)
    if time_limit_s is not None and \
            _seconds(time_limit_s, "--time", 0.0, MAX_TIME_LIMIT_S) <= 0:
        raise SpecError("--time must be longer than 0s")


def check_runnable(command: Any, cwd: Any, env: Any, stop_signal: Any) -> None:
    """What the agent needs to start a job, checked again at its start: a row written by
    a hand that bypassed validation (a privileged database role) fails with the reason
    instead of breaking the agent. SpecError."""
    _command(command)
    _text(cwd, "cwd", MAX_PATH, nul_only=True)
    _env(env)
    if not isinstance(stop_signal, str):
        raise SpecError("the stop signal must be a signal name")
    signal_name(stop_signal)


def signal_name(value: str) -> str:
    """'TERM', 'sigterm', '15' -> 'SIGTERM'; SpecError for anything else."""
    v = value.strip().upper()
    if v == "SIGTERM":  # the default, catchable everywhere: no need to load the table
        return v
    import signal

    if v.isdigit():
        try:
            return signal.Signals(int(v)).name
        except ValueError:
            raise SpecError(f"unknown signal {_shown(value)}") from None
    if not v.startswith("SIG"):
        v = "SIG" + v
    if v not in signal.Signals.__members__ or v in ("SIGKILL", "SIGSTOP"):
        raise SpecError(f"unknown or uncatchable signal {_shown(value)}")
    return v


def job_label(name: str | None, command: Any) -> str:
    """What people call a job: its --name, else its script's (or its program's) file
    name, as `status` and notifications show it."""
    if name:
        return str(name)
    cmd = [str(c) for c in command or ["?"]]
    first = os.path.basename(cmd[0])
    if first.startswith(("python", "python3")) and len(cmd) > 1 and not cmd[1].startswith("-"):
        return os.path.basename(cmd[1])
    return first


def show_duration(s: float | None) -> str:
    """Seconds as people read them: 8.5s, 42s, 3m07s, 2h05m, 3d04h ("-" for None)."""
    if s is None:
        return "-"
    s = max(0.0, s)
    if s < 60:
        return f"{s:.0f}s" if s >= 10 else f"{s:.1f}s"
    if s < 3600:
        return f"{s // 60:.0f}m{s % 60:02.0f}s"
    if s < 86400:
        return f"{s // 3600:.0f}h{(s % 3600) // 60:02.0f}m"
    return f"{s // 86400:.0f}d{(s % 86400) // 3600:02.0f}h"


def show_size(n: int) -> str:
    """Bytes as people read them: 512 B, 3.1 KiB, 20 GiB."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" or size >= 100 or size == int(size) \
                else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # unreachable: the loop ends at TiB


def format_duration(seconds: float) -> str:
    """Seconds in the options' own terms, exact to the millisecond, for scripts to
    read back: 3600 -> '1h', 5400 -> '1h30m', 90061.25 -> '1d1h1m1.25s', 0 -> '0s'."""
    ms = round(max(0.0, seconds) * 1000)
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000)):
        n, ms = divmod(ms, size)
        if n:
            parts.append(f"{n}{unit}")
    if ms or not parts:
        whole, frac = divmod(ms, 1000)
        parts.append(f"{whole}.{frac:03d}".rstrip("0").rstrip(".") + "s" if frac else f"{whole}s")
    return "".join(parts)


def parse_duration(text: str) -> float:
    """'90', '90s', '15m', '2h', '1d', '1h30m' -> seconds."""
    t = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return float(t)
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhdw])", t)
    if not parts or "".join(a + b for a, b in parts) != t:
        raise SpecError(f"cannot read duration {_shown(text)} (try 30s, 15m, 2h, 1d)")
    unit = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    return sum(float(n) * unit[u] for n, u in parts)
