"""`tpuq submit`: build a checked job spec and queue it.

Fast path, in both deployments: hand the spec to the local agent over its Unix socket
(no SQLAlchemy or Celery import, tens of milliseconds); the agent writes it and rings.
On a machine without an agent of this deployment, write it to the database directly.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

import click

from tpuq import arrays
from tpuq.cli import context
from tpuq.cli.args import cancel_on_interrupt_option
from tpuq.cli.errors import UserError
from tpuq.spec import JobSpec, SpecError
from tpuq.state.states import JobState
from tpuq.submitopts import SubmitOptions, resolve

if TYPE_CHECKING:
    from tpuq.settings import Settings


def _did_you_mean(option: str) -> str:
    """`--chip` -> " (did you mean --chips?)": submit takes unknown options as the
    command's words, so Click's own suggestion never runs for them."""
    import difflib

    ctx = click.get_current_context(silent=True)
    names = [n for p in (ctx.command.params if ctx else []) for n in getattr(p, "opts", [])
             if n.startswith("--")]
    close = difflib.get_close_matches(option.split("=", 1)[0], names, n=1, cutoff=0.7)
    return f" (did you mean {close[0]}?)" if close else ""


def build_command(args: tuple[str, ...], python: str | None) -> list[str]:
    first = args[0]
    if first.startswith("-"):
        raise UserError(f"no such option: {first}{_did_you_mean(first)} "
                        "(see `tpuq submit --help`)")
    try:
        return resolve(args, python)
    except SpecError as e:
        raise UserError(str(e)) from None


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
    _submit(**opts, sources=sources)


# options that say how this shell shows the result, not what the job is: never stored
_NOT_SOURCED = {"command", "wait_end", "cancel_on_interrupt", "quiet", "as_json"}


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
            if name in _NOT_SOURCED or \
                    sub.get_parameter_source(name) is not ParameterSource.COMMANDLINE:
                continue
            if ctx.get_parameter_source(name) in (ParameterSource.DEFAULT,
                                                  ParameterSource.DEFAULT_MAP, None):
                opts[name] = value
                from_script.add(name)
    sources: dict[str, str] = {}
    for param in ctx.command.params:
        name = param.name or ""
        if name in _NOT_SOURCED or not isinstance(param, click.Option):
            continue
        flag = max(param.opts, key=len)
        if name in from_script:
            sources[flag] = "#TPUQ"
        elif ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE:
            sources[flag] = "command line"
        elif ctx.get_parameter_source(name) is ParameterSource.ENVIRONMENT:
            sources[flag] = "environment"
    return opts, sources


def _submit(command: tuple[str, ...], name: str | None, chips: int | None,
            tpu_type: str | None, team: str | None, priority: int,
            env_items: tuple[str, ...], export: str, stop_signal: str, grace: str | None,
            time_limit: str | None, max_retries: int, no_requeue: bool, no_tcmalloc: bool,
            python: str | None, hold: bool, after: tuple[str, ...],
            after_any: tuple[str, ...], array_spec: str | None, args_file: Any,
            notify: str | None, notify_to: tuple[str, ...], begin: str | None,
            output: str | None, wait_end: bool, cancel_on_interrupt: bool, quiet: bool,
            as_json: bool, sources: dict[str, str]) -> None:
    cfg = context.settings()
    after_ids, after_tasks = job_refs(after, "--after")
    after_any_ids, after_any_tasks = job_refs(after_any, "--after-any")
    opts = SubmitOptions(
        name=name, chips=chips, tpu_type=tpu_type, team=team, priority=priority,
        env=env_items, export=export, stop_signal=stop_signal, grace=grace,
        time_limit=time_limit, max_retries=max_retries, requeue=not no_requeue,
        tcmalloc=not no_tcmalloc, python=python, notify=notify, notify_to=notify_to,
        hold=hold, after=after_ids, after_any=after_any_ids, after_tasks=after_tasks,
        after_any_tasks=after_any_tasks, begin=begin, output=output,
        option_sources=sources)
    command_line = build_command(command, python)
    try:
        spec = opts.spec(command_line, cfg)
    except SpecError as e:
        raise UserError(str(e)) from None
    array = _array(array_spec, args_file)
    job_id, tasks, notes = _send(cfg, opts, spec, array)
    from tpuq.cli.wait import interruptible

    # from here on the job is queued: Ctrl-C names it (and cancels it, if asked to)
    with interruptible(tasks or [job_id], cancel=wait_end and cancel_on_interrupt,
                       array=job_id if tasks else None):
        _tell(job_id, tasks, notes, hold, quiet, as_json)
        if wait_end:
            _wait(tasks or [job_id], say=not quiet and not as_json)


def _tell(job_id: int, tasks: list[int], notes: list[str], hold: bool, quiet: bool,
          as_json: bool) -> None:
    state = JobState.HELD if hold else JobState.QUEUED
    if as_json:
        context.echo_json({"id": job_id, "state": state, **({"tasks": tasks} if tasks else {})})
    elif quiet:
        click.echo(job_id)
    elif tasks:
        click.echo(f"submitted array {job_id}: {len(tasks)} tasks, jobs {tasks[0]}..{tasks[-1]}"
                   + (" (held)" if hold else ""))
    else:
        click.echo(f"submitted job {job_id}" + (" (held)" if hold else ""))
    for note in notes:  # on stderr, so even -q and --json show them
        click.echo(note, err=True)


def _wait(every: list[int], say: bool) -> None:
    from tpuq.cli.wait import exit_status, wait_for

    code = exit_status(wait_for(every, say=say), every)
    if code:
        raise SystemExit(code)




def job_refs(values: tuple[str, ...], option: str) -> tuple[list[int], list[list[int]]]:
    """`--after 3,54 --after 60_2` -> ([3, 54], [[60, 2]]): jobs (an array's id: every
    task of it) and single array tasks; a usage error for anything else."""
    ids: list[int] = []
    tasks: list[list[int]] = []
    for part in ",".join(values).split(","):
        if not part.strip():
            continue
        try:
            job, index = arrays.parse_ref(part)
        except SpecError as e:
            raise UserError(f"{option}: {e}") from None
        if index is None:
            ids.append(job)
        else:
            tasks.append([job, index])
    return ids, tasks


Array = tuple[list[int], list[list[str]], int | None]


def _array(spec: str | None, args_file: Any) -> Array | None:
    """(indices, per-task arguments, throttle) from --array and --args-file."""
    if spec is None and args_file is None:
        return None
    try:
        indices, throttle = arrays.parse(spec) if spec else ([], None)
    except SpecError as e:
        raise UserError(str(e)) from None
    if args_file is None:
        return indices, [], throttle
    lines = [shlex.split(line, comments=True) for line in args_file.read().splitlines()]
    args = [words for words in lines if words]
    if not args:
        raise UserError(f"--args-file {args_file.name}: no lines of arguments")
    if spec and (len(indices) != len(args)):
        raise UserError(f"--array has {len(indices)} tasks but --args-file "
                        f"{args_file.name} has {len(args)} lines")
    return (indices or list(range(len(args)))), args, throttle


def _send(cfg: Settings, opts: SubmitOptions, spec: JobSpec,
          array: Array | None) -> tuple[int, list[int], list[str]]:
    """Queue the spec; (job id, an array's task ids, warnings and notes for the user)."""
    from tpuq.protocol import Submitted

    indices, args, throttle = array or ([], [], None)
    reply = context.ask(opts.request(spec, array=indices, array_args=args,
                                     throttle=throttle), Submitted)
    notes = list(reply.warnings)
    if cfg.embedded and not context.client().via_agent:
        notes.append(context.agent_elsewhere() or
                     "note: no agent is running on this VM; start one with `tpuq agent`")
    return reply.id, list(reply.tasks), notes


COMMANDS = [submit]
