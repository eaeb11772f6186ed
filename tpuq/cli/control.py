"""Commands that change jobs and hosts: cancel, preempt, hold, release, resubmit, drain."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

import click

from tpuq.cli import context
from tpuq.cli.args import JOB_ID, words_option
from tpuq.cli.errors import EXIT, Refused, UserError
from tpuq.protocol import Action, Failure
from tpuq.spec import SpecError, parse_duration
from tpuq.state.states import OPEN, in_order

if TYPE_CHECKING:
    from tpuq.jobjson import ListedJob


def _act(ids: tuple[int, ...], action: Action, as_json: bool,
         arrays: tuple[int, ...] = ()) -> None:
    from tpuq.protocol import MAX_IDS, Control, Results

    if not ids and not arrays:
        raise UserError("name the jobs (IDs) or --array ID")
    if len(arrays) > MAX_IDS:
        raise UserError(f"{len(arrays)} arrays: at most {MAX_IDS} at once")
    results: list[dict[str, Any]] = []
    # a request carries at most MAX_IDS ids (`cancel --mine` may find more): in batches
    for start in range(0, max(len(ids), 1), MAX_IDS):
        batch = Control(action=action, ids=list(ids[start:start + MAX_IDS]),
                        arrays=list(arrays) if start == 0 else [])
        results += context.ask(batch, Results).results
    _report(results, as_json)


def _report(results: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        context.echo_json(results)
    else:
        for r in results:
            if r["ok"]:
                click.echo(f"job {r['id']}: {r['message']}")
            else:
                click.echo(f"tpuq: error: job {r['id']} {r['message']}", err=True)
    failed = [r for r in results if not r["ok"]]
    if failed:
        raise click.exceptions.Exit(EXIT[Failure(failed[0].get("kind") or "conflict")])


ids_argument = click.argument("job_ids", nargs=-1, type=JOB_ID, required=True)
array_option = words_option("--array", "arrays", item=JOB_ID, metavar="ID[,ID]",
                            help="Every task of this array that has not ended. Repeatable, "
                                 "or comma-separated.")


@click.command()
@click.argument("job_ids", nargs=-1, type=JOB_ID)
@array_option
@click.option("--mine", is_flag=True, help="Every job of mine not ended yet (with the filters).")
@words_option("--state", "states", choices=in_order(OPEN),
              help="With --mine: only jobs in these states (repeatable, or comma-separated).")
@click.option("--name", "name_pattern", help="With --mine: only jobs whose NAME matches (glob).")
@click.option("-y", "--yes", is_flag=True, help="Do not ask (scripts): cancel what --mine finds.")
@context.json_option
def cancel(job_ids: tuple[int, ...], arrays: tuple[int, ...], mine: bool,
           states: tuple[str, ...], name_pattern: str | None, yes: bool, as_json: bool) -> None:
    """Cancel jobs. Queued ones end at once; running ones get their stop signal (default
    SIGTERM) on the whole process group, their grace period, then SIGKILL.

    \b
      tpuq cancel 12 13
      tpuq cancel --array 40                  every task of array 40 not ended yet
      tpuq cancel --mine --state queued       says which, asks first (-y: does not)
      tpuq cancel --mine --name 'sweep-*' -y
    """
    if mine:
        job_ids = (*job_ids, *_mine(states, name_pattern, yes))
        if not job_ids and not arrays:
            click.echo("no job of yours matches", err=True)
            return
    elif states or name_pattern:
        raise UserError("--state and --name choose among your jobs: add --mine")
    _act(job_ids, Action.CANCEL, as_json, arrays)


def _mine(states: tuple[str, ...], name_pattern: str | None, yes: bool) -> list[int]:
    """My open jobs that match, after saying which (and asking, unless --yes)."""
    import fnmatch
    import sys

    from tpuq.cli.status import job_name
    from tpuq.protocol import Identity, JobList, ListJobs, WhoAmI

    me = context.ask(WhoAmI(), Identity).user
    open_states = list(states) or list(in_order(OPEN))
    jobs = cast("list[ListedJob]", context.ask(ListJobs(owner=me, states=open_states),
                                               JobList).jobs)
    picked = [j for j in jobs
              if name_pattern is None or fnmatch.fnmatch(job_name(j), name_pattern)]
    if not picked:
        return []
    click.echo(f"{len(picked)} job{'s' if len(picked) != 1 else ''} of {me}: "
               + " ".join(f"{j['id']} ({job_name(j)}, {j['state']})" for j in picked), err=True)
    if not yes:
        if not sys.stdin.isatty():
            raise UserError("no terminal to ask on: add --yes to cancel them")
        click.confirm("cancel them?", abort=True, err=True)
    return [j["id"] for j in picked]


@click.command()
@ids_argument
@context.json_option
def preempt(job_ids: tuple[int, ...], as_json: bool) -> None:
    """Preempt running jobs as host maintenance would: signal, grace, requeue."""
    _act(job_ids, Action.PREEMPT, as_json)


@click.command()
@click.argument("job_ids", nargs=-1, type=JOB_ID)
@array_option
@context.json_option
def hold(job_ids: tuple[int, ...], arrays: tuple[int, ...], as_json: bool) -> None:
    """Keep queued jobs from starting until released."""
    _act(job_ids, Action.HOLD, as_json, arrays)


@click.command()
@click.argument("job_ids", nargs=-1, type=JOB_ID)
@array_option
@context.json_option
def release(job_ids: tuple[int, ...], arrays: tuple[int, ...], as_json: bool) -> None:
    """Let held jobs run again."""
    _act(job_ids, Action.RELEASE, as_json, arrays)


@click.command()
@click.argument("job_id", type=JOB_ID)
@click.option("--priority", type=int, help="Its new priority (higher runs first in its team).")
@click.option("--time", "time_limit", help="Its new time limit per attempt, e.g. 6h.")
@click.option("--begin", "begin", metavar="TIME",
              help="Start it no earlier than TIME, as submit's --begin reads it (22:00, +2h, "
                   "2026-12-01T06:30, ...); `--begin now` lets it start at once.")
@click.option("--hold", is_flag=True, help="Hold it too (`tpuq release ID` lets it run).")
@context.json_option
def update(job_id: int, priority: int | None, time_limit: str | None, begin: str | None,
           hold: bool, as_json: bool) -> None:
    """Change a job that has not started (as scontrol update): its priority, its time
    limit, when it may begin, or hold it. Its owner or an admin.

    \b
      tpuq update 12 --priority 5 --time 6h
      tpuq update 12 --begin 22:00          wait until then (`--begin now`: start at once)
    """
    from tpuq.protocol import Results, Update
    from tpuq.submitopts import update_fields

    try:
        priority, seconds, begin_at = update_fields(priority, time_limit or None, begin)
    except SpecError as e:
        raise UserError(str(e)) from None
    if priority is None and seconds is None and begin_at is None and not hold:
        raise UserError("nothing to change: --priority N, --time 6h, --begin TIME or --hold")
    results = []
    if priority is not None or seconds is not None or begin_at is not None:
        results += context.ask(Update(id=job_id, priority=priority, time_limit_s=seconds,
                                      begin_at=begin_at), Results).results
    if hold:
        from tpuq.protocol import Control

        results += context.ask(Control(action=Action.HOLD, ids=[job_id]), Results).results
    _report(results, as_json)


@click.command()
@click.argument("job_ids", nargs=-1, type=JOB_ID)
@click.option("--failed", is_flag=True, help="Every failed or timed-out job not resubmitted yet.")
@click.option("--since", help="With --failed: only jobs that ended within this time (e.g. 1d).")
@click.option("--dry-run", is_flag=True, help="Say what would be resubmitted.")
@context.json_option
def resubmit(job_ids: tuple[int, ...], failed: bool, since: str | None, dry_run: bool,
             as_json: bool) -> None:
    """Queue new jobs from earlier ones' specs, each linked to its original and owned by
    you (someone else's job runs with your shell's environment, not theirs).

    \b
      tpuq resubmit 12 13
      tpuq resubmit --failed --since 1d
    """
    from tpuq.protocol import Done, Refusal, Resubmit, Results
    from tpuq.submitopts import Resubmission

    if not job_ids and not failed:
        raise UserError("give job ids, or --failed")
    try:
        horizon = time.time() - parse_duration(since) if since else None
    except SpecError as e:
        raise UserError(str(e)) from None
    how = Resubmission.here(context.settings())
    req = Resubmit(ids=list(job_ids), failed=failed, failed_since=horizon, dry_run=dry_run,
                   env=how.env, notify=how.notify, notify_to=how.notify_to)
    reply = context.client().call(req)
    if isinstance(reply, Refusal):
        raise Refused(reply.kind, reply.error)
    if isinstance(reply, Done):
        click.echo(reply.message)
        return
    _report(reply.results if isinstance(reply, Results) else [], as_json)


@click.command()
@click.argument("host")
def drain(host: str) -> None:
    """Stop giving work to HOST and preempt what runs there (requeued elsewhere; admins)."""
    _drain(host, True)


@click.command()
@click.argument("host")
def undrain(host: str) -> None:
    """Let HOST take work again (admins)."""
    _drain(host, False)


def _drain(host: str, draining: bool) -> None:
    from tpuq.protocol import Done, Drain

    click.echo(context.ask(Drain(host=host, draining=draining), Done).message)


@click.group()
def host() -> None:
    """Hosts as the deployment knows them (admins)."""


@host.command("forget")
@click.argument("name")
def host_forget(name: str) -> None:
    """Remove host NAME, gone for good, from `tpuq status` (admins).

    \b
    Refused while NAME's agent is alive: stop it first. Jobs that still held NAME's chips
    are requeued once their leases run out. An agent that starts again under NAME
    registers it again.
    """
    from tpuq.protocol import Done, ForgetHost

    click.echo(context.ask(ForgetHost(host=name), Done).message)


COMMANDS = [cancel, preempt, hold, release, update, resubmit, drain, undrain, host]
