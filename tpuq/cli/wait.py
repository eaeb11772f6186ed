"""`tpuq wait ID...` and `submit --wait`: block until jobs end, exit with their outcome.

Exit status (README "Exit status"): 0 every job succeeded; otherwise the first failed
job's (in the order given): 10 failed, 11 cancelled, 12 timeout, so
`tpuq wait 12 && tpuq submit eval.py` chains. `tpuq logs -f` exits the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from tpuq.cli import context
from tpuq.cli.args import JOB_ID
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


@click.command()
@click.argument("job_ids", nargs=-1, required=True, type=JOB_ID)
@context.json_option
def wait(job_ids: tuple[int, ...], as_json: bool) -> None:
    """Wait until the jobs end; exit 0 if all succeeded, else 10 failed, 11 cancelled,
    12 timeout (the first such job's, in the order given).

    \b
      tpuq wait 12 && tpuq submit eval.py
    """
    ended = wait_for(job_ids, say=not as_json)
    if as_json:
        context.echo_json([{"id": i, "state": ended[i]} for i in job_ids])
    code = exit_status(ended, job_ids)
    if code:
        raise SystemExit(code)


COMMANDS = [wait]
