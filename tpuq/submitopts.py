"""Submit options, and the one mapping from them to a job spec and its request.

`tpuq submit`, the Python API (`tpuq.client.submit`, `submit_command`, `submit_many`)
and `tpuq resubmit`/`update` all say what a person asked for as SubmitOptions (or the
few fields a resubmit or update takes) and turn it into a JobSpec here, so an option
means the same thing whichever way it came in. The spec itself is checked by the one
validator (JobSpec.validate); SpecError says what is wrong, in one line.

Import-light (no SQLAlchemy, no Click): the CLI's fast path loads it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from tpuq import jobenv
from tpuq.records import Record, field
from tpuq.spec import JobSpec, SpecError, notify_asked, parse_duration

TYPE_CHECKING = False  # typing costs an import; the type checker reads this as True
if TYPE_CHECKING:
    from typing import Any

    from tpuq.protocol import Submit
    from tpuq.settings import Settings


Captured = tuple[dict[str, str], list[str]]


class SubmitOptions(Record):
    """What `tpuq submit` takes besides the command; the same names as its options
    (`--time` is `time_limit`, `--signal` `stop_signal`). Durations are seconds or text
    such as "12h"."""

    name: str | None = None
    chips: int | None = None
    tpu_type: str | None = None
    team: str | None = None  # None: the configured team
    priority: int = 0
    env: Sequence[str] = ()  # NAME[=VALUE] items, as --env
    export: str = jobenv.EXPORT_ALL
    stop_signal: str = "SIGTERM"
    grace: str | float | None = None  # None: TPUQ_DEFAULT_GRACE_S
    time_limit: str | float | None = None
    max_retries: int = 0
    requeue: bool = True  # --no-requeue: False
    tcmalloc: bool = True  # --no-tcmalloc: False
    python: str | None = None  # the interpreter of a .py script (None: this shell's)
    notify: str | None = None  # None: the configured default
    notify_to: Sequence[str] = ()  # empty: the configured default
    hold: bool = False
    after: Sequence[int] = ()  # an array's id: every task of it
    after_any: Sequence[int] = ()
    after_tasks: Sequence[Sequence[int]] = ()  # single array tasks: (array id, index)
    after_any_tasks: Sequence[Sequence[int]] = ()
    begin: str | float | None = None  # --begin: text (22:00, +2h, ISO) or epoch seconds
    output: str | None = None  # --output: a path (%j, %a...), relative to the job's cwd
    option_sources: Mapping[str, str] | None = None  # option -> where it came from
    session: bool = False  # `tpuq run`: started on its caller's terminal, never requeued

    @classmethod
    def names(cls) -> frozenset[str]:
        return frozenset(cls.field_names())

    @classmethod
    def pick(cls, values: dict[str, Any]) -> tuple[SubmitOptions, dict[str, Any]]:
        """(the options among `values`, the rest): a Python call's keywords, whose
        others are the function's own."""
        names = cls.names()
        mine = {k: v for k, v in values.items() if k in names}
        return cls(**mine), {k: v for k, v in values.items() if k not in names}

    def merged(self, **more: Any) -> SubmitOptions:
        """These options with `more` changed (per-job options over a batch's)."""
        unknown = set(more) - self.names()
        if unknown:
            raise SpecError(f"unknown submit option {sorted(unknown)[0]!r}")
        return self.replace(**more)

    def spec(self, command: Sequence[str], cfg: Settings, *,
             environ: Mapping[str, str] | None = None, cwd: str | None = None,
             default_name: str | None = None, captured: Captured | None = None) -> JobSpec:
        """The validated spec of `command` (already resolved: see `resolve`) run with
        these options, from this process's directory and environment (`captured`: what
        `capture` gave for these options already)."""
        env, dropped = captured or self.capture(os.environ if environ is None else environ)
        urls = [self.notify_to] if isinstance(self.notify_to, str) else list(self.notify_to)
        events, destinations = notify_asked(self.notify, urls, cfg)
        return JobSpec(
            command=list(command), cwd=cwd or os.getcwd(), env=dict(env),
            env_dropped=list(dropped),
            owner=cfg.user_name, team=self.team or cfg.team,
            name=self.name if self.name is not None else default_name,
            priority=self.priority, chips=self.chips, tpu_type=self.tpu_type,
            stop_signal=self.stop_signal,
            grace_s=cfg.default_grace_s if self.grace is None else seconds(self.grace),
            time_limit_s=None if self.time_limit is None else seconds(self.time_limit),
            max_retries=self.max_retries, requeue_on_preempt=self.requeue,
            tcmalloc=self.tcmalloc, notify=events, notify_to=destinations,
            begin_at=begin_time(self.begin), output=output_path(self.output, cwd),
            option_sources=dict(self.option_sources) if self.option_sources else None,
            session=self.session,
        ).validate()

    def capture(self, environ: Mapping[str, str]) -> Captured:
        """The job's environment from `environ` (--env, --export) and the TPU variables
        it will not get."""
        env = jobenv.capture(environ, tuple(self.env), self.export)
        if self.session:  # what the caller's terminal is (TERM, COLORTERM)
            env.update(jobenv.terminal(environ))
        return env, jobenv.dropped(environ, tuple(self.env))

    def request(self, spec: JobSpec, *, function: str = "", array: Sequence[int] = (),
                array_args: Sequence[Sequence[str]] = (),
                throttle: int | None = None) -> Submit:
        """The Submit request that queues `spec` with these options."""
        from tpuq.protocol import Submit

        return Submit(spec=spec.to_dict(), held=self.hold, after=ids(self.after, "after"),
                      after_any=ids(self.after_any, "after_any"),
                      after_tasks=[list(t) for t in self.after_tasks],
                      after_any_tasks=[list(t) for t in self.after_any_tasks],
                      array=list(array),
                      array_args=[list(a) for a in array_args], throttle=throttle,
                      function=function)


def begin_time(value: str | float | None) -> float | None:
    """--begin as epoch seconds: text as tpuq/begin.py reads it (22:00, +2h, ISO), or
    epoch seconds already."""
    if value is None:
        return None
    if isinstance(value, str):
        import time

        from tpuq import begin

        return begin.parse(value, time.time())
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"begin: a time such as 22:00 or +2h, or epoch seconds, got {value!r}")
    return float(value)


def output_path(text: str | None, cwd: str | None = None) -> str | None:
    """--output PATH, made absolute from the job's directory (its %j... kept), or None."""
    if text is None:
        return None
    if not text or "\x00" in text:
        raise SpecError("--output needs a file name")
    return text if text.startswith("/") else os.path.join(cwd or os.getcwd(), text)


def seconds(value: str | float | int) -> float:
    """A duration as given: seconds, or text such as "90s", "12h"."""
    if isinstance(value, str):
        return parse_duration(value) if value.strip() else _empty()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"a duration is seconds or text such as 12h, got {value!r}")
    return float(value)


def _empty() -> float:
    raise SpecError("an empty duration (try 30s, 15m, 2h, 1d)")


def ids(values: Sequence[Any], what: str) -> list[int]:
    """Job ids as given in Python (ints, or Job handles with an `id`)."""
    out = []
    for v in [values] if isinstance(values, int) else values:
        v = getattr(v, "id", v)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SpecError(f"{what}: job ids are positive integers, got {v!r}")
        out.append(v)
    return out


def submitter_python() -> str:
    """The interpreter a `python` typed in this shell would run (the active venv's)."""
    venv = os.environ.get("VIRTUAL_ENV")
    if venv and os.access(os.path.join(venv, "bin", "python"), os.X_OK):
        return os.path.join(venv, "bin", "python")
    import shutil  # here: a command given by its path (`-- /bin/sh`) never loads it

    return shutil.which("python3") or shutil.which("python") or sys.executable


def resolve(args: Sequence[str], python: str | None) -> list[str]:
    """A command as typed -> what the job runs: a .py script with `python` (this
    shell's by default), a path made absolute, a bare name found on PATH."""
    if not args:
        raise SpecError("no command given")
    first = args[0]
    if first.endswith(".py"):
        if not os.path.isfile(first):
            raise SpecError(f"script not found: {first}")
        return [python or submitter_python(), os.path.abspath(first), *args[1:]]
    if os.sep in first:
        if not (os.path.isfile(first) and os.access(first, os.X_OK)):
            raise SpecError(f"not an executable file: {first}")
        return [os.path.abspath(first), *args[1:]]
    import shutil

    found = shutil.which(first)
    if found is None:
        here = os.path.isfile(first)
        hint = f" (it is a file here: run it as `-- ./{first}` or `-- bash {first}`)" \
            if here else ""
        raise SpecError(f"command not found: {first}{hint}")
    return [found, *args[1:]]


class Resubmission(Record):
    """What `tpuq resubmit` adds to an earlier job's spec: the resubmitter's environment
    (used for someone else's job) and the resubmitter's notification defaults."""

    env: dict[str, str] = field(default_factory=dict)
    notify: str | None = None
    notify_to: str | None = None

    @classmethod
    def here(cls, cfg: Settings, environ: Mapping[str, str] | None = None) -> Resubmission:
        events, urls = notify_asked(None, [], cfg)
        return cls(env=jobenv.capture(os.environ if environ is None else environ, ()),
                   notify=events, notify_to=urls)

    def apply(self, spec: JobSpec, job_id: int, owner: str) -> JobSpec:
        """`spec` (job `job_id`'s) as resubmitted by `owner`."""
        if spec.owner != owner:
            spec.env, spec.owner = dict(self.env), owner
        spec.resubmit_of = job_id
        spec.notify, spec.notify_to = self.notify, self.notify_to
        return spec


def update_fields(priority: int | None, time_limit: str | float | None,
                  begin: str | float | None = None
                  ) -> tuple[int | None, float | None, float | None]:
    """`tpuq update`'s changes, in the spec's units (checked by spec.check_update):
    priority, time limit (seconds), --begin (epoch seconds, read as submit reads it)."""
    return priority, None if time_limit is None else seconds(time_limit), begin_time(begin)
