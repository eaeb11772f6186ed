"""What `tpuq submit` does once its command line is read: build the checked spec, queue it,
tell the user. Click-free: the command's two readers (cli/submit.py, Click's, for every
command line; cli/quick.py for the common ones, without loading Click) both end here.

Fast path, in both deployments: the spec goes to the local agent over its Unix socket
(no SQLAlchemy or Celery import, tens of milliseconds); the agent writes it and rings.
On a machine without an agent of this deployment, it is written to the database directly.
"""

from __future__ import annotations

import sys

from tpuq.cli import context
from tpuq.cli.interrupts import interruptible
from tpuq.spec import JobSpec, SpecError
from tpuq.state.states import JobState
from tpuq.submitopts import SubmitOptions, resolve

TYPE_CHECKING = False  # typing costs an import; the type checker reads this as True
if TYPE_CHECKING:
    from typing import Any

    from tpuq.settings import Settings

# options that say how this shell shows the result, not what the job is: never stored
NOT_SOURCED = frozenset({"command", "wait_end", "cancel_on_interrupt", "quiet", "as_json"})


def build_command(args: tuple[str, ...] | list[str], python: str | None) -> list[str]:
    first = args[0]
    if first.startswith("-"):
        raise SpecError(f"no such option: {first}{_did_you_mean(first)} "
                        "(see `tpuq submit --help`)")
    return resolve(args, python)


def _did_you_mean(option: str) -> str:
    """`--chip` -> " (did you mean --chips?)", from the options of the Click command
    running (submit takes unknown options as the command's words, so Click's own
    suggestion never runs for them); "" outside Click (cli/quick.py leaves such a line
    to Click)."""
    click = sys.modules.get("click")
    ctx = click.get_current_context(silent=True) if click else None
    if ctx is None:
        return ""
    import difflib

    names = [n for p in ctx.command.params for n in getattr(p, "opts", [])
             if n.startswith("--")]
    close = difflib.get_close_matches(option.split("=", 1)[0], names, n=1, cutoff=0.7)
    return f" (did you mean {close[0]}?)" if close else ""


def submit(given: dict[str, Any], sources: dict[str, str]) -> None:
    """Queue the job `given` describes (the option names of `tpuq submit`, as Click
    passes them; `sources`: where each set option came from) and say so."""
    cfg = context.settings()
    after_ids, after_tasks = job_refs(given["after"], "--after")
    after_any_ids, after_any_tasks = job_refs(given["after_any"], "--after-any")
    opts = SubmitOptions(
        name=given["name"], chips=given["chips"], tpu_type=given["tpu_type"],
        team=given["team"], priority=given["priority"], env=given["env_items"],
        export=given["export"], stop_signal=given["stop_signal"], grace=given["grace"],
        time_limit=given["time_limit"], max_retries=given["max_retries"],
        requeue=not given["no_requeue"], tcmalloc=not given["no_tcmalloc"],
        python=given["python"], notify=given["notify"], notify_to=given["notify_to"],
        hold=given["hold"], after=after_ids, after_any=after_any_ids,
        after_tasks=after_tasks, after_any_tasks=after_any_tasks, begin=given["begin"],
        output=given["output"], option_sources=sources)
    command_line = build_command(given["command"], given["python"])
    spec = opts.spec(command_line, cfg)
    array = _array(given["array_spec"], given["args_file"])
    job_id, tasks, notes = _send(cfg, opts, spec, array)
    wait_end = given["wait_end"]
    # from here on the job is queued: Ctrl-C names it (and cancels it, if asked to)
    with interruptible(tasks or [job_id], cancel=wait_end and given["cancel_on_interrupt"],
                       array=job_id if tasks else None):
        _tell(job_id, tasks, notes, given["hold"], given["quiet"], given["as_json"])
        if wait_end:
            _wait(tasks or [job_id], say=not given["quiet"] and not given["as_json"])


def _tell(job_id: int, tasks: list[int], notes: list[str], hold: bool, quiet: bool,
          as_json: bool) -> None:
    state = JobState.HELD if hold else JobState.QUEUED
    if as_json:
        context.echo_json({"id": job_id, "state": state, **({"tasks": tasks} if tasks else {})})
    elif quiet:
        context.echo(str(job_id))
    elif tasks:
        context.echo(f"submitted array {job_id}: {len(tasks)} tasks, jobs "
                     f"{tasks[0]}..{tasks[-1]}" + (" (held)" if hold else ""))
    else:
        context.echo(f"submitted job {job_id}" + (" (held)" if hold else ""))
    for note in notes:  # on stderr, so even -q and --json show them
        context.echo(note, err=True)


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
        from tpuq import arrays

        try:
            job, index = arrays.parse_ref(part)
        except SpecError as e:
            raise SpecError(f"{option}: {e}") from None
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
    from tpuq import arrays

    indices, throttle = arrays.parse(spec) if spec else ([], None)
    if args_file is None:
        return indices, [], throttle
    import shlex

    lines = [shlex.split(line, comments=True) for line in args_file.read().splitlines()]
    args = [words for words in lines if words]
    if not args:
        raise SpecError(f"--args-file {args_file.name}: no lines of arguments")
    if spec and (len(indices) != len(args)):
        raise SpecError(f"--array has {len(indices)} tasks but --args-file "
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
