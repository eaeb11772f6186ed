"""`tpuq submit`: Click's reader of its command line (every option, `--help`, `#TPUQ`
lines). A plain command line is read without Click by cli/quick.py, which declines to
this one for anything else; both hand what they read to cli/submitting.py.
"""

from __future__ import annotations

from typing import Any

import click

from tpuq.cli import context, submitting
from tpuq.cli.args import cancel_on_interrupt_option
from tpuq.cli.errors import UserError
from tpuq.spec import SpecError


@click.command(context_settings={"ignore_unknown_options": True,
                                 "allow_interspersed_args": False})
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
@click.option("--name", envvar="TPUQ_JOB_NAME", help="A name to recognise the job by.")
@click.option("--chips", type=int, envvar="TPUQ_CHIPS",
              help="Chips to use (default: the whole host). 4-chip hosts allow 1, 2, 4; "
                   "8-chip hosts 1, 2, 4, 8.")
@click.option("--tpu-type", envvar="TPUQ_JOB_TPU_TYPE", help="Only hosts of this type, e.g. v4-8.")
@click.option("--team", envvar="TPUQ_TEAM", help="Team to charge (default from configuration).")
@click.option("--priority", type=int, default=0, show_default=True, envvar="TPUQ_PRIORITY",
              help="Higher runs first within your team's fair share.")
@click.option("--env", "env_items", multiple=True, metavar="NAME[=VALUE]",
              help="Set a variable for the job (NAME alone copies it from this shell). Repeatable.")
@click.option("--export", "export", default="ALL", show_default=True, envvar="TPUQ_EXPORT",
              metavar="ALL|NONE|VAR,...",
              help="Which of this shell's variables the job gets: ALL (but terminal-session "
                   "ones), NONE (PATH, venv, JAX_*... only) or those plus VAR,...")
@click.option("--signal", "stop_signal", default="SIGTERM", show_default=True,
              envvar="TPUQ_SIGNAL", help="Signal sent to the job's process group to stop it.")
@click.option("--grace", envvar="TPUQ_GRACE",
              help="Time between the stop signal and SIGKILL, e.g. 30s, 5m "
                   "(default: TPUQ_DEFAULT_GRACE_S, 30s).")
@click.option("--time", "time_limit", envvar="TPUQ_TIME_LIMIT",
              help="Time limit per attempt (e.g. 12h); the job then gets its signal and grace.")
@click.option("--max-retries", type=int, default=0, show_default=True, envvar="TPUQ_MAX_RETRIES",
              help="Run a failed job again up to N times, with backoff. Preemptions never count.")
@click.option("--no-requeue", is_flag=True, help="Do not requeue the job after a preemption.")
@click.option("--no-tcmalloc", is_flag=True,
              help="Do not LD_PRELOAD TCMalloc for this job (it is used when present).")
@click.option("--python", envvar="TPUQ_PYTHON",
              help="Interpreter for a .py script (default: the python of this shell's venv).")
@click.option("--hold", is_flag=True, help="Queue it held; `tpuq release ID` lets it run.")
@click.option("--after", "after", multiple=True, metavar="ID[,ID]",
              help="Start only once these jobs succeeded; if one does not, this job is "
                   "cancelled. An array's id means every task of it, ID_N task N only. "
                   "Repeatable.")
@click.option("--after-any", "after_any", multiple=True, metavar="ID[,ID]",
              help="Start only once these jobs (an array's id: all its tasks; ID_N: one "
                   "task) ended, however they ended. Repeatable.")
@click.option("--array", "array_spec", metavar="0-99%8",
              help="Queue one task per index (TPUQ_ARRAY_INDEX): ranges, lists 1,3,5-7, "
                   "steps 0-99:2; %N: at most N run at once. One submission.")
@click.option("--args-file", type=click.File("r"), metavar="FILE",
              help="Queue one task per line of FILE, the line's words appended to the "
                   "command (TPUQ_ARRAY_INDEX = the line's number from 0; # comments).")
@click.option("--notify", "notify", metavar="end|fail|preempt|start|all|none",
              envvar="TPUQ_NOTIFY",
              help="Tell me when the job ends, fails (or times out), is preempted more "
                   "than TPUQ_NOTIFY_PREEMPTS times, or starts (each attempt); comma "
                   "separated; all = end,fail,preempt (default: notify in the config file; "
                   "end when only a destination is given).")
@click.option("--notify-to", "notify_to", multiple=True, metavar="URL", envvar="TPUQ_NOTIFY_TO",
              help="Where to tell: an Apprise URL, e.g. mailto://user:pass@example.org, "
                   "slack://A/B/C, discord://ID/TOKEN, json://host/path (default: notify_to "
                   "in the config file). Repeatable.")
@click.option("--begin", "begin", envvar="TPUQ_BEGIN", metavar="TIME",
              help="Start no earlier than TIME: 22:00 (next such time), +2h, now+30m, "
                   "2026-12-01T06:30, midnight, tomorrow (local time).")
@click.option("--output", "output", envvar="TPUQ_OUTPUT", metavar="PATH",
              help="Also write the job's output to PATH, as you: %j job id, %a array index, "
                   "%A array id, %u user, %x name (e.g. logs/%j.out). `tpuq logs` still has it.")
@click.option("--wait", "wait_end", is_flag=True,
              help="Wait until the job ends; exit with its outcome as `tpuq wait` does.")
@cancel_on_interrupt_option
@click.option("-q", "--quiet", is_flag=True, help="Print only the job id.")
@context.json_option
def submit(**given: Any) -> None:
    """Queue a job: a Python script or, after --, any command.

    \b
      tpuq submit train.py --lr 3e-4          runs <your python> train.py --lr 3e-4
      tpuq submit --chips 1 -- bash run.sh a  any command, one chip
      tpuq submit --time 12h --max-retries 2 train.py
      tpuq submit --after 12 eval.py          once job 12 succeeded (an array: every task)
      tpuq submit --begin 22:00 --output /data/logs/%j.out train.py

    The job runs in this directory with this shell's interpreter, as the only user of
    its chips. Options for tpuq come before the script; everything after it is the
    script's own arguments. `#TPUQ --chips 1 --time 2h` lines at the top of the script
    set options too; the command line (or an option's variable) wins over them.
    """
    opts, sources = with_directives(click.get_current_context(), given)
    submitting.submit(opts, sources)


def with_directives(ctx: click.Context, given: dict[str, Any]
                    ) -> tuple[dict[str, Any], dict[str, str]]:
    """The options with the script's #TPUQ directives filled in where neither the command
    line nor an environment variable set them; and where each set option came from."""
    from click.core import ParameterSource

    from tpuq import directives

    opts = dict(given)
    script = directives.script_of(list(given["command"]))
    try:
        found = directives.read(script) if script else []
    except SpecError as e:
        raise UserError(str(e)) from None
    from_script: set[str] = set()
    if found:
        assert script is not None
        words = directives.words_of(found)
        if {"--help", "-h"} & set(words):
            raise UserError(f"{script}: #TPUQ --help is not an option for a job")
        try:
            sub = ctx.command.make_context("submit", [*words, "--", "true"],
                                           parent=ctx.parent, resilient_parsing=False)
        except click.UsageError as e:
            raise UserError(f"{script}: #TPUQ {' '.join(words)}: {e.format_message()}") \
                from None
        if list(sub.params["command"]) != ["true"]:
            raise UserError(f"{script}: #TPUQ lines hold options only, not "
                            f"{sub.params['command'][0]!r}")
        for name, value in sub.params.items():
            if name in submitting.NOT_SOURCED or \
                    sub.get_parameter_source(name) is not ParameterSource.COMMANDLINE:
                continue
            if ctx.get_parameter_source(name) in (ParameterSource.DEFAULT,
                                                  ParameterSource.DEFAULT_MAP, None):
                opts[name] = value
                from_script.add(name)
    sources: dict[str, str] = {}
    for param in ctx.command.params:
        name = param.name or ""
        if name in submitting.NOT_SOURCED or not isinstance(param, click.Option):
            continue
        flag = max(param.opts, key=len)
        if name in from_script:
            sources[flag] = "#TPUQ"
        elif ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE:
            sources[flag] = "command line"
        elif ctx.get_parameter_source(name) is ParameterSource.ENVIRONMENT:
            sources[flag] = "environment"
    return opts, sources


COMMANDS = [submit]
