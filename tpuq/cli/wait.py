"""`tpuq wait ID...` and `submit --wait`: block until jobs end, exit with their outcome.

Exit status (README "Exit status"): 0 every job succeeded; otherwise the first failed
job's (in the order given): 10 failed, 11 cancelled, 12 timeout, so
`tpuq wait 12 && tpuq submit eval.py` chains. `tpuq logs -f` exits the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from tpuq.cli import context
from tpuq.cli.args import cancel_on_interrupt_option
from tpuq.cli.errors import UserError
from tpuq.cli.interrupts import interruptible, on_interrupt
from tpuq.state.states import JobState

OUTCOME_EXIT: dict[str, int] = {JobState.SUCCEEDED: 0, JobState.FAILED: 10,
                                 JobState.CANCELLED: 11, JobState.TIMEOUT: 12}



def outcome_exit(state: str) -> int:
    return OUTCOME_EXIT.get(state, 1)


def wait_for(ids: Sequence[int], *, say: bool = True) -> dict[int, str]:
    """Each job's final state, once all have ended (asked with a growing pause)."""
    from tpuq.client import wait_ended
    from tpuq.protocol import JobDetail, ShowJob

    def told(job_id: int, state: str) -> None:
        if say:
            click.echo(f"job {job_id} {state}", err=True)

    return wait_ended(lambda i: str(context.ask(ShowJob(id=i), JobDetail).job["state"]),
                      ids, on_end=told)


def exit_status(ended: dict[int, str], ids: Sequence[int]) -> int:
    return next((outcome_exit(ended[i]) for i in ids if ended[i] != JobState.SUCCEEDED), 0)


def resolve(refs: Sequence[str]) -> list[int]:
    """The jobs `tpuq wait` names, as SLURM reads them: `12` a job, or every task when 12
    is an array's id; `54_2` task 2 of array 54."""
    from tpuq import arrays
    from tpuq.protocol import JobDetail, ShowJob
    from tpuq.spec import SpecError

    out: list[int] = []
    for ref in refs:
        try:
            job_id, index = arrays.parse_ref(ref)
        except SpecError as e:
            raise UserError(str(e)) from None
        shown = context.ask(ShowJob(id=job_id), JobDetail).job
        tasks = shown.get("array_tasks") or []
        if index is None:
            out += [t[0] for t in tasks] or [job_id]
            continue
        found = [t[0] for t in tasks if t[1] == index]
        if not found:
            raise UserError(f"no task {job_id}_{index}: " + (
                f"array {job_id} has indices {tasks[0][1]}..{tasks[-1][1]}" if tasks
                else f"job {job_id} is not an array's id"))
        out += found
    return list(dict.fromkeys(out))


@click.command()
@click.argument("refs", nargs=-1, required=True, metavar="ID...")
@cancel_on_interrupt_option
@context.json_option
def wait(refs: tuple[str, ...], cancel_on_interrupt: bool, as_json: bool) -> None:
    """Wait until the jobs end; exit 0 if all succeeded, else 10 failed, 11 cancelled,
    12 timeout (the first such job's, in the order given). An array's id means every
    task of it; ID_N one task.

    \b
      tpuq wait 12 && tpuq submit eval.py
      tpuq wait 54                            every task of array 54
      tpuq wait 54_3                          task 3 of array 54

    Ctrl-C stops waiting (exit 130) and names the jobs, which go on; with
    --cancel-on-interrupt it cancels them.
    """
    try:
        job_ids = resolve(refs)
    except KeyboardInterrupt:  # while the ids were looked up: look again, to name them
        on_interrupt(resolve(refs), cancel=cancel_on_interrupt)
    with interruptible(job_ids, cancel=cancel_on_interrupt):
        ended = wait_for(job_ids, say=not as_json)
    if as_json:
        context.echo_json([{"id": i, "state": ended[i]} for i in job_ids])
    code = exit_status(ended, job_ids)
    if code:
        raise SystemExit(code)


COMMANDS = [wait]
