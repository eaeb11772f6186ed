"""`tpuq show ID`: one job's spec, its attempts and its timeline."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, cast

import click

from tpuq.cli import context, render
from tpuq.cli.args import JOB_ID
from tpuq.jobjson import epoch
from tpuq.state.states import Outcome

if TYPE_CHECKING:
    from tpuq.jobjson import AttemptObject, JobObject, ShownJob


@click.command()
@click.argument("job_id", type=JOB_ID)
@context.json_option
def show(job_id: int, as_json: bool) -> None:
    """Show a job: what was asked, each attempt (host, pid, exit, checkpoint), and events.

    With --json, the job object of docs/reference.md "The JSON contract": times in ISO
    8601 (UTC), durations as options take them (1h30m).
    """
    from tpuq.protocol import JobDetail, ShowJob

    job = cast("ShownJob", context.ask(ShowJob(id=job_id), JobDetail).job)
    if as_json:
        context.echo_json(job)
        return
    click.echo(_spec_text(job))
    if job["attempt_list"]:
        click.echo("\nattempts:")
        for a in job["attempt_list"]:
            click.echo("  " + _attempt_line(a))
    if job.get("worker_list"):
        click.echo(f"\nworkers (attempt {job['worker_list'][0]['attempt']}):")
        for w in job["worker_list"]:
            how = w["outcome"] or w["state"]
            code = f", exit {w['exit_code']}" if w["exit_code"] is not None else \
                f", signal {w['exit_signal']}" if w["exit_signal"] is not None else ""
            click.echo(f"  w{w['worker']}  {w['host']}  pid {w['pid'] or '-'}  {how}{code}"
                       f"{'  ' + w['reason'] if w['reason'] else ''}")
    if job.get("notifications"):
        click.echo("\nnotifications:")
        for n in job["notifications"]:
            how = {"sent": f"sent {render.clock(n['sent_at'])}",
                   "pending": f"pending (tried {n['tries']} times)" if n["tries"] else "pending",
                   "failed": f"FAILED after {n['tries']} tries", "skipped": "nothing to tell"
                   }.get(n["state"], n["state"])
            err = f": {n['error']}" if n["error"] and n["state"] != "skipped" else ""
            about = f" ({n['detail']})" if n.get("detail") else ""
            click.echo(f"  {render.clock(n['at'])}  {n['event']}{about}  {how}{err}")
    for o in job.get("logs_over_budget") or ():
        click.echo(f"\nlogs over budget: {o['says']}")
    click.echo("\ntimeline:")
    for e in job["events"]:
        frm = f"{e['from']} -> " if e["from"] else ""
        click.echo(f"  {render.clock(e['at'])}  {frm}{e['to']}  {e['reason'] or ''}"
                   f"{'  [' + e['actor'] + ']' if e['actor'] else ''}")


def _spec_text(job: ShownJob) -> str:
    limit = job["time_limit"]
    lines = [
        f"job {job['id']} ({job['name']}): {job['state']}",
        f"  command   {render.command_words(job['command'])}",
        f"  cwd       {job['cwd']}",
        f"  owner     {job['owner']} (team {job['team']}), priority {job['priority']}",
        f"  chips     {_chips(job)}"
        f"{', type ' + job['tpu_type'] if job['tpu_type'] else ''}",
        f"  stop      {job['stop_signal']}, grace {job['grace']}"
        f"{', time limit ' + limit if limit else ''}",
        f"  failures  {job['failures']} (retried {min(job['failures'], job['max_retries'])} of "
        f"{job['max_retries']} allowed); preempted {job['preemptions']} times",
    ]
    where = checkpoint_words(job)
    if where:
        lines.append(f"  ckpt dir  {where}")
    if job.get("notify"):
        lines.append(f"  notify    {job['notify']}")
    if job["env"]:
        names = sorted(job["env"])
        more = f", ... ({len(names)} in all; --json lists them)" if len(names) > 8 else ""
        lines.append(f"  env       {', '.join(names[:8])}{more}")
    if job.get("env_dropped"):
        lines.append(f"  dropped   {', '.join(job['env_dropped'])} (TPU variables tpuq sets "
                     "or clears for each job; docs/tpu-vm.md)")
    if job.get("begin_at"):
        lines.append(f"  begin     {render.clock(job['begin_at'])} (--begin)")
    if job.get("output"):
        lines.append(f"  output    {job['output']} (--output, written as {job['owner']})")
    if job.get("array_tasks"):
        tasks = job["array_tasks"]
        lines.append(f"  array     {job['id']}: task {job['array_index']} of "
                     f"{len(tasks)} (jobs {tasks[0][0]}..{tasks[-1][0]}); `--after "
                     f"{job['id']}` and `tpuq wait {job['id']}` mean every task, "
                     f"{job['id']}_{job['array_index']} this one")
    elif job.get("array_id") is not None:
        lines.append(f"  array     task {job['array_id']}_{job['array_index']}")
    for dep in job.get("after") or ():
        how = "succeeded" if dep["kind"] == "ok" else "ended"
        left = f", {dep['unmet']} not yet" if dep.get("array") and dep["unmet"] else ""
        lines.append(f"  after     {dep['says']}{left} (must have {how})")
    for option, where in sorted((job.get("option_sources") or {}).items()):
        lines.append(f"  option    {option} from {where}")
    if job["resubmit_of"]:
        lines.append(f"  resubmits job {job['resubmit_of']}")
    if job["waiting_for"]:
        lines.append(f"  waiting   {job['waiting_for']}")
    if job["reason"]:
        lines.append(f"  last      {job['reason']}")
    return "\n".join(lines)


def _chips(job: JobObject) -> str:
    if not job["whole_host"]:
        return str(job["chips"])
    return "whole host" if job["chips"] is None else f"whole host ({job['chips']})"


def checkpoint_words(job: JobObject) -> str:
    """Where a job's checkpoints live, in words ("" before its first assignment)."""
    where = job.get("checkpoint_dir")
    if not where:
        return ""
    if job.get("checkpoint_host"):
        return f"{job['checkpoint_host']}:{where} (on that host's disk only)"
    return f"{where} (shared: the same on every host)"


def _attempt_line(a: AttemptObject) -> str:
    began = epoch(a["started_at"])
    end = epoch(a["ended_at"]) or (time.time() if began and a["outcome"] is None else None)
    ran = end - began if began and end else None
    text = (f"#{a['number']} {a['host']} chips {','.join(map(str, a['chips']))}  "
            f"pid {a['pid'] or '-'}  started {render.clock(a['started_at'])}  "
            f"ran {render.duration(ran)}  {a['outcome'] or 'running'}: {a['reason'] or ''}")
    if a.get("started_over"):
        text += f"\n      started over: {a['started_over']}"
    step, step_at = a["checkpoint_step"], a["checkpoint_at"]
    if a["outcome"] == Outcome.PREEMPTED:
        text += f"\n      preempted at {render.clock(a['ended_at'])}"
        if step is not None:
            lost = (epoch(a["ended_at"]) or 0) - (epoch(step_at) or 0)
            text += (f", last checkpoint step {step} ({render.clock(step_at)}), "
                     f"lost {render.duration(lost)} of work")
        else:
            text += ", no checkpoint reported (tpuq.job.checkpointed)"
    elif step is not None:
        total = a.get("checkpoint_total")
        text += (f"\n      last checkpoint step {step}{f'/{total}' if total else ''} at "
                 f"{render.clock(step_at)} ({render.ago(step_at)} ago)")
        eta = epoch(a["eta_at"])
        if a["outcome"] is None and eta:
            text += f", ETA {render.duration(eta - time.time())}"
    return text


COMMANDS = [show]
