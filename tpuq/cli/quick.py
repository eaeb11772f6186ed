"""`tpuq submit`'s command line read without Click, when it is a plain one.

Loading Click costs more than the rest of a submit through the agent (bench/README.md),
so the `tpuq` executable first offers `submit`'s arguments to `read` below. It reads
only what it reads exactly as Click would, into the same values Click passes to the
command (tests/cli/test_quick_submit.py holds the two readers to the same result over
generated command lines and environments), and declines everything else to Click,
which then reads the line itself: `--help`, a mistake of any kind, an option it does not
know (short ones but `-q`), `--wait` and `--args-file`, a script with `#TPUQ` lines, a
value its variable gives to a repeatable option or a flag, any TPUQ_SUBMIT_* variable
(Click's own name for every option's variable) and the variables the `tpuq` group
reads itself (TPUQ_VERSION, shell completion's). What follows the reading is
one code path for both (cli/submitting.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

TYPE_CHECKING = False  # typing costs an import; the type checker reads this as True
if TYPE_CHECKING:
    from typing import Any

TEXT, INT, FLAG, MANY = "text", "int", "flag", "many"

# Every option read here, in the order `tpuq submit` declares them: its flags, the name
# of the value Click passes, the kind, and the variable that sets it (None: none but
# Click's TPUQ_SUBMIT_<NAME>, which sends the line to Click).
OPTIONS: tuple[tuple[tuple[str, ...], str, str, str | None], ...] = (
    (("--name",), "name", TEXT, "TPUQ_JOB_NAME"),
    (("--chips",), "chips", INT, "TPUQ_CHIPS"),
    (("--tpu-type",), "tpu_type", TEXT, "TPUQ_JOB_TPU_TYPE"),
    (("--team",), "team", TEXT, "TPUQ_TEAM"),
    (("--priority",), "priority", INT, "TPUQ_PRIORITY"),
    (("--env",), "env_items", MANY, None),
    (("--export",), "export", TEXT, "TPUQ_EXPORT"),
    (("--signal",), "stop_signal", TEXT, "TPUQ_SIGNAL"),
    (("--grace",), "grace", TEXT, "TPUQ_GRACE"),
    (("--time",), "time_limit", TEXT, "TPUQ_TIME_LIMIT"),
    (("--max-retries",), "max_retries", INT, "TPUQ_MAX_RETRIES"),
    (("--no-requeue",), "no_requeue", FLAG, None),
    (("--no-tcmalloc",), "no_tcmalloc", FLAG, None),
    (("--python",), "python", TEXT, "TPUQ_PYTHON"),
    (("--hold",), "hold", FLAG, None),
    (("--after",), "after", MANY, None),
    (("--after-any",), "after_any", MANY, None),
    (("--array",), "array_spec", TEXT, None),
    (("--notify",), "notify", TEXT, "TPUQ_NOTIFY"),
    (("--notify-to",), "notify_to", MANY, "TPUQ_NOTIFY_TO"),
    (("--begin",), "begin", TEXT, "TPUQ_BEGIN"),
    (("--output",), "output", TEXT, "TPUQ_OUTPUT"),
    (("-q", "--quiet"), "quiet", FLAG, None),
    (("--json",), "as_json", FLAG, "TPUQ_JSON"),
)
# values Click gives an option not set (None for the rest, False for a flag, () for a
# repeatable one), and those of the options only Click reads
DEFAULTS = {"priority": 0, "export": "ALL", "stop_signal": "SIGTERM", "max_retries": 0,
            "args_file": None, "wait_end": False, "cancel_on_interrupt": False}
AUTO_PREFIX = "TPUQ_SUBMIT_"
CANCEL_VARIABLE = "TPUQ_CANCEL_ON_INTERRUPT"  # --cancel-on-interrupt's
# what the `tpuq` group reads before any command: its options' variables (--version's,
# --help's) and Click's shell-completion switch
GROUP_VARIABLES = ("TPUQ_VERSION", "TPUQ_HELP", "TPUQ__CLICK_DEFAULT_HELP", "_TPUQ_COMPLETE")
# options that are not part of the job (submitting.NOT_SOURCED), as the table names them
_SHOWN_ONLY = frozenset({"quiet", "as_json"})

_BY_FLAG = {flag: row for row in OPTIONS for flag in row[0]}


def read(args: list[str], environ: Mapping[str, str]
         ) -> tuple[dict[str, Any], dict[str, str]] | None:
    """(the values Click would pass to `submit`, where each option came from) for
    `tpuq submit ARGS` in `environ`; None to leave the line to Click."""
    if any(environ.get(v) for v in (CANCEL_VARIABLE, *GROUP_VARIABLES)) or \
            any(v for k, v in environ.items() if k.startswith(AUTO_PREFIX)):
        return None
    given: dict[str, Any] = {name: False if kind == FLAG else () if kind == MANY else None
                             for _, name, kind, _ in OPTIONS}
    given.update(DEFAULTS)
    from_line: set[str] = set()
    command: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            command = args[i:]
            break
        if arg[:1] != "-" or len(arg) == 1:
            command = args[i - 1:]
            break
        flag, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        row = _BY_FLAG.get(flag)
        if row is None:
            return None  # --help, a short option, one only Click reads, a mistake
        _, name, kind, _ = row
        if kind == FLAG:
            if eq:
                return None
            given[name] = True
        else:
            if not eq:
                if i == len(args):
                    return None
                value = args[i]
                i += 1
            if kind == MANY:
                given[name] = (*given[name], value) if name in from_line else (value,)
            else:
                given[name] = _converted(kind, value)
                if given[name] is _REFUSED:
                    return None
        from_line.add(name)
    if not command or command[0][:1] == "-":
        return None
    given["command"] = tuple(command)
    sources: dict[str, str] = {}
    for flags, name, kind, var in OPTIONS:
        set_by = environ.get(var) if var else None
        if name in from_line:
            if name not in _SHOWN_ONLY:
                sources[max(flags, key=len)] = "command line"
        elif set_by:  # a flag's or a repeatable option's variable is read Click's way
            given[name] = _REFUSED if kind in (FLAG, MANY) else _converted(kind, set_by)
            if given[name] is _REFUSED:
                return None
            sources[max(flags, key=len)] = "environment"
    return given, sources


_REFUSED = object()


def _converted(kind: str, text: str) -> object:
    """An option's value as Click converts it (int() for a whole number); _REFUSED where
    Click refuses it."""
    if kind != INT:
        return text
    try:
        return int(text)
    except ValueError:
        return _REFUSED


def submit(args: list[str]) -> bool:
    """Run `tpuq submit ARGS` if `read` reads it and its script has no `#TPUQ` lines,
    its output flushed; False, having done nothing, to leave it to Click."""
    read_as = read(args, os.environ)
    if read_as is None:
        return False
    given, sources = read_as
    from tpuq import directives
    from tpuq.spec import SpecError

    script = directives.script_of(list(given["command"]))
    try:
        if script and directives.read(script):
            return False
    except SpecError:
        return False
    from tpuq.cli import submitting

    try:
        submitting.submit(given, sources)
        for out in (sys.stdout, sys.stderr):
            if out is not None:  # None: closed (`>&-`)
                out.flush()
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - as the command line does
        from tpuq.cli.main import fail

        fail(e)
    return True
