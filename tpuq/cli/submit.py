"""`tpuq submit`: build a checked job spec and queue it.

Fast path, in both deployments: hand the spec to the local agent over its Unix socket
(no SQLAlchemy or Celery import, tens of milliseconds); the agent writes it and rings.
On a machine without an agent of this deployment, write it to the database directly.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from typing import TYPE_CHECKING, Any

import click

from tpuq import arrays, jobenv
from tpuq.cli import context
from tpuq.cli.args import JOB_ID
from tpuq.cli.errors import UserError
from tpuq.spec import JobSpec, SpecError, notify_asked, parse_duration
from tpuq.state.states import JobState

if TYPE_CHECKING:
    from tpuq.settings import Settings


def submitter_python() -> str:
    """The interpreter a `python` typed in this shell would run (the active venv's)."""
    venv = os.environ.get("VIRTUAL_ENV")
    if venv and os.access(os.path.join(venv, "bin", "python"), os.X_OK):
        return os.path.join(venv, "bin", "python")
    return shutil.which("python3") or shutil.which("python") or sys.executable


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
    if first.endswith(".py"):
        if not os.path.isfile(first):
            raise UserError(f"script not found: {first}")
        return [python or submitter_python(), os.path.abspath(first), *args[1:]]
    if os.sep in first:
        if not (os.path.isfile(first) and os.access(first, os.X_OK)):
            raise UserError(f"not an executable file: {first}")
        return [os.path.abspath(first), *args[1:]]
    found = shutil.which(first)
    if found is None:
        here = os.path.isfile(first)
        hint = f" (it is a file here: run it as `-- ./{first}` or `-- bash {first}`)" \
            if here else ""
        raise UserError(f"command not found: {first}{hint}")
    return [found, *args[1:]]


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
                   "cancelled. Repeatable.")
@click.option("--after-any", "after_any", multiple=True, metavar="ID[,ID]",
              help="Start only once these jobs ended, however they ended. Repeatable.")
@click.option("--array", "array_spec", metavar="0-99%8",
              help="Queue one task per index (TPUQ_ARRAY_INDEX): ranges, lists 1,3,5-7, "
                   "steps 0-99:2; %N: at most N run at once. One submission.")
@click.option("--args-file", type=click.File("r"), metavar="FILE",
              help="Queue one task per line of FILE, the line's words appended to the "
                   "command (TPUQ_ARRAY_INDEX = the line's number from 0; # comments).")
@click.option("--notify", "notify", metavar="end|fail|preempt|all|none", envvar="TPUQ_NOTIFY",
              help="Tell me when the job ends, fails (or times out), or is preempted more "
                   "than TPUQ_NOTIFY_PREEMPTS times; comma separated (default: notify in the "
                   "config file; end when only a destination is given).")
@click.option("--notify-to", "notify_to", multiple=True, metavar="URL", envvar="TPUQ_NOTIFY_TO",
              help="Where to tell: an Apprise URL, e.g. mailto://user:pass@example.org, "
                   "slack://A/B/C, discord://ID/TOKEN, json://host/path (default: notify_to "
                   "in the config file). Repeatable.")
@click.option("--wait", "wait_end", is_flag=True,
              help="Wait until the job ends; exit with its outcome as `tpuq wait` does.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the job id.")
@context.json_option
def submit(command: tuple[str, ...], name: str | None, chips: int | None, tpu_type: str | None,
           team: str | None, priority: int, env_items: tuple[str, ...], export: str,
           stop_signal: str,
           grace: str | None, time_limit: str | None, max_retries: int, no_requeue: bool,
           no_tcmalloc: bool, python: str | None, hold: bool, after: tuple[str, ...],
           after_any: tuple[str, ...], array_spec: str | None, args_file: Any,
           notify: str | None, notify_to: tuple[str, ...], wait_end: bool, quiet: bool,
           as_json: bool) -> None:
    """Queue a job: a Python script or, after --, any command.

    \b
      tpuq submit train.py --lr 3e-4          runs <your python> train.py --lr 3e-4
      tpuq submit --chips 1 -- bash run.sh a  any command, one chip
      tpuq submit --time 12h --max-retries 2 train.py
      tpuq submit --after 12 eval.py          once job 12 succeeded

    The job runs in this directory with this shell's interpreter, as the only user of
    its chips. Options for tpuq come before the script; everything after it is the
    script's own arguments.
    """
    cfg = context.settings()
    events, destinations = notify_asked(notify, notify_to, cfg)
    try:
        spec = JobSpec(
            command=build_command(command, python), cwd=os.getcwd(),
            env=jobenv.capture(os.environ, env_items, export),
            env_dropped=jobenv.dropped(os.environ, env_items),
            owner=cfg.user_name, team=team or cfg.team, name=name, priority=priority,
            chips=chips, tpu_type=tpu_type, stop_signal=stop_signal,
            grace_s=parse_duration(grace) if grace else cfg.default_grace_s,
            time_limit_s=parse_duration(time_limit) if time_limit else None,
            max_retries=max_retries, requeue_on_preempt=not no_requeue, tcmalloc=not no_tcmalloc,
            notify=events, notify_to=destinations,
        ).validate()
    except SpecError as e:
        raise UserError(str(e)) from None
    array = _array(array_spec, args_file)
    job_id, tasks, notes = _send(cfg, spec, hold, job_ids(after, "--after"),
                                 job_ids(after_any, "--after-any"), array)
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
    if wait_end:
        from tpuq.cli.wait import exit_status, wait_for

        every = tasks or [job_id]
        code = exit_status(wait_for(every, say=not quiet and not as_json), every)
        if code:
            raise SystemExit(code)


def job_ids(values: tuple[str, ...], option: str) -> list[int]:
    """`--after 3,4 --after 5` -> [3, 4, 5]; a usage error for anything else."""
    out = []
    for part in ",".join(values).split(","):
        if not part.strip():
            continue
        try:
            out.append(JOB_ID.convert(part, None, None))
        except click.BadParameter as e:
            raise UserError(f"{option}: {e.message}") from None
    return out


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


def _send(cfg: Settings, spec: JobSpec, hold: bool, after: list[int],
          after_any: list[int], array: Array | None) -> tuple[int, list[int], list[str]]:
    """Queue the spec; (job id, an array's task ids, warnings and notes for the user)."""
    from tpuq.protocol import Submit, Submitted

    indices, args, throttle = array or ([], [], None)
    reply = context.ask(Submit(spec=spec.to_dict(), held=hold, after=after,
                               after_any=after_any, array=indices, array_args=args,
                               throttle=throttle), Submitted)
    notes = list(reply.warnings)
    if cfg.embedded and not context.client().via_agent:
        notes.append("note: no agent is running on this VM; start one with `tpuq agent`")
    return reply.id, list(reply.tasks), notes


COMMANDS = [submit]
