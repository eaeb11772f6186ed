"""`tpuq status`: what runs, whose, how far, and why the rest waits; and the hosts.

Tables are Rich's: one line per row at any width (columns are cut with an ellipsis,
the rightmost first, never wrapped), colour only on a terminal and never with NO_COLOR.
"""

from __future__ import annotations

import fnmatch
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import click

from tpuq.cli import context, render
from tpuq.cli.args import words_option
from tpuq.jobjson import epoch
from tpuq.spec import job_label
from tpuq.state.states import ACTIVE, LIVE, WAITING, JobState, StopRequest, in_order

STATES = tuple(st.value for st in JobState)
PIPE_WIDTH = 1000  # no terminal: rows are not cut (scripts should read --json)


if TYPE_CHECKING:  # types only: `status` does not pay for building them
    from tpuq.jobjson import ListedJob

    class Row(ListedJob, total=False):
        """A job as a table row: the waiting tasks of an array collapse into one."""

        tasks: list[int]  # the array's waiting tasks this row stands for
        shown_id: str  # `12_[3-99]`


def job_name(j: Mapping[str, Any]) -> str:
    """The job's --name, else its script's (or its command's) file name; an array's
    task gets its index: `sweep.py[7]`."""
    base = job_label(j.get("name"), j["command"])
    if j.get("array_index") is not None and not j.get("tasks"):
        return f"{base}[{j['array_index']}]"
    return base


def shown_state(j: ListedJob) -> str:
    if j["state"] == JobState.PREEMPTING and j.get("stop_request") == StopRequest.CANCEL:
        return "cancelling"
    return str(j["state"])


def progress(j: ListedJob, now: float) -> str:
    """The last step reported (of a total, if the job gave one) and, for a running job
    that gave a total, when it should end; else how long ago it reported."""
    if j.get("step") is None:
        return "-"
    total, eta = j.get("total"), j.get("eta_at")
    text = f"step {j['step']}/{total}" if total else f"step {j['step']}"
    if total and eta and j["state"] in LIVE:
        return f"{text}, ETA {render.duration((epoch(eta) or now) - now)}"
    return text + (f" ({render.ago(j['step_at'], now)} ago)" if j.get("step_at") else "")


def age(j: ListedJob, now: float) -> str:
    """Queued: since submit; running: its runtime; ended: since it ended."""
    if j["state"] in ACTIVE and j.get("started_at"):
        return render.ago(j["started_at"], now)
    if j.get("ended_at"):
        return render.ago(j["ended_at"], now) + " ago"
    return render.ago(j["submitted_at"], now)


def reason(j: ListedJob) -> str:
    if j["state"] == JobState.QUEUED:
        return str(j.get("waiting_for") or "")
    if j["state"] == JobState.HELD:
        return j.get("reason") or f"held: `tpuq release {j['id']}` lets it run"
    return str(j.get("reason") or "")


def start(j: ListedJob, now: float) -> str:
    """When a queued job should start (`--start`): now, or in how long and at what
    local time; `-` when no estimate can be given (REASON says why)."""
    if j["state"] != JobState.QUEUED or "expected_start" not in j:
        return "-"
    at = epoch(j["expected_start"])
    if at is None:
        return "-"
    if at <= now + 1:
        return "now"
    fmt = "%H:%M" if at - now < 86400 else "%a %H:%M"
    return f"in {render.duration(at - now)} ({time.strftime(fmt, time.localtime(at))})"


def checkpoint(j: ListedJob) -> str:
    """Where its checkpoints live: `shared` (the same on every host), `HOST only` (that
    host's disk), `-` (no attempt yet). `tpuq show` gives the path."""
    if not j.get("checkpoint_dir"):
        return "-"
    return f"{j['checkpoint_host']} only" if j.get("checkpoint_host") else "shared"


def chips(j: ListedJob) -> str:
    n = "all" if j["whole_host"] else str(j["chips"])
    return f"{n}/{j['tpu_type']}" if j.get("tpu_type") else n


Cell = Callable[["Row", float], str]
COLUMNS: dict[str, tuple[str, Cell]] = {
    "id": ("ID", lambda j, now: str(j.get("shown_id") or j["id"])),
    "name": ("NAME", lambda j, now: job_name(j)),
    "user": ("USER", lambda j, now: str(j["owner"])),
    "team": ("TEAM", lambda j, now: str(j["team"])),
    "state": ("STATE", lambda j, now: shown_state(j)),
    "chips": ("CHIPS", lambda j, now: chips(j)),
    "host": ("HOST", lambda j, now: j["host"] or "-"),
    "tries": ("TRY", lambda j, now: str(j["attempts"])),
    "progress": ("PROGRESS", progress),
    "time": ("TIME", age),
    "start": ("START", start),
    "reason": ("REASON", lambda j, now: reason(j)),
    "command": ("COMMAND", lambda j, now: render.command_words(j["command"])),
    "checkpoint": ("CHECKPOINT", lambda j, now: checkpoint(j)),
}
DEFAULT = "id,name,user,state,chips,host,progress,time,reason"
STARTS = "id,name,user,state,chips,time,start,reason"  # --start, as squeue --start
COLOURS = {JobState.RUNNING: "green", JobState.SUCCEEDED: "green", JobState.FAILED: "red",
           JobState.TIMEOUT: "red", JobState.CANCELLED: "yellow", "cancelling": "yellow",
           JobState.PREEMPTING: "yellow", JobState.HELD: "blue"}


def parse_format(text: str) -> list[str]:
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in COLUMNS]
    if bad or not names:
        raise click.BadParameter(f"unknown column {', '.join(bad) or '(none)'}; "
                                 f"columns: {', '.join(COLUMNS)}", param_hint="'-o'")
    return names


@click.command()
@click.option("--all", "show_all", is_flag=True, help="Every job, not only open and recent ones.")
@click.option("--mine", is_flag=True, help="Only my jobs.")
@click.option("--user", envvar="TPUQ_STATUS_USER", help="Only this user's jobs.")
@click.option("--team", "team_filter", help="Only this team's jobs.")
@words_option("--state", "states", choices=STATES,
              help="Only jobs in these states (repeatable, or comma-separated).")
@click.option("--name", "name_pattern", help="Only jobs whose NAME matches (glob: 'sweep-*').")
@click.option("--host", "host_filter", help="Only jobs on this host.")
@click.option("-n", "--recent", default=20, show_default=True,
              help="How many finished jobs to show.")
@click.option("-o", "--format", "fmt", default=DEFAULT, show_default=True,
              envvar="TPUQ_STATUS_FORMAT",
              help=f"Columns, as squeue -o: any of {', '.join(COLUMNS)}.")
@click.option("--watch", is_flag=True, help="Refresh in place every 2 s (Ctrl-C ends).")
@click.option("--expand", is_flag=True,
              help="One row per waiting array task (default: one row per array).")
@click.option("--start", "starts", is_flag=True,
              help="Waiting jobs only, each with when it should start (as squeue --start), "
                   "from the scheduler's plan run forward; or why no time can be given.")
@context.json_option
def status(show_all: bool, mine: bool, user: str | None, team_filter: str | None,
           states: tuple[str, ...], name_pattern: str | None, host_filter: str | None,
           recent: int, fmt: str, watch: bool, expand: bool, starts: bool,
           as_json: bool) -> None:
    """Show jobs (open ones and the most recent finished) and hosts: what runs, whose,
    how far, and why the rest waits.

    \b
      tpuq status --mine --state queued,held   why are mine waiting?
      tpuq status --user alice --team vision   someone's, a team's
      tpuq status --name 'sweep-*' --host tpu-a by name glob, by host
      tpuq status -n 50                        the 50 most recent ended jobs
      tpuq status --all                        every job ever
      tpuq status --expand                     one row per waiting array task
      tpuq status -o id,name,state,reason      pick columns, as squeue -o
      tpuq status --watch                      refresh in place every 2 s
      tpuq status --start                      when will my queued jobs start?
      tpuq status --json                       job objects for scripts

    With --json, prints a JSON list of job objects (id, name, state, attempts, host,
    exit_code, command, waiting_for, started_at, step, ...): times in ISO 8601 (UTC),
    durations as options take them (1h30m); docs/reference.md "The JSON contract".
    """
    if starts:
        states = states or in_order(WAITING)
        fmt = STARTS if fmt == DEFAULT else fmt
    columns = parse_format(fmt)
    owner = user
    if mine:
        from tpuq.protocol import Identity, WhoAmI

        owner = context.ask(WhoAmI(), Identity).user

    fleet: list[str] = []  # what the fleet's VMs wait for (tpuq fleet status)

    def fetch() -> tuple[list[Row], list[dict[str, Any]], float]:
        from tpuq.client import ClientError
        from tpuq.protocol import Failure, JobList, ListJobs

        # the agent sends an array's waiting tasks as one row where the table shows
        # them so and no filter here needs each task
        folded = not (as_json or expand or name_pattern or host_filter)
        req = ListJobs(owner=owner, team=team_filter, states=list(states), recent=recent,
                       everything=show_all, starts=starts, collapse=folded)
        try:
            reply = context.ask(req, JobList)
        except ClientError as e:  # an agent of an earlier release: without the field
            if not (folded and e.kind is Failure.BAD_REQUEST and "collapse" in e.message):
                raise
            reply = context.ask(req.replace(collapse=False), JobList)
        jobs = cast("list[Row]", [
            j for j in cast("list[ListedJob]", reply.jobs)
            if (name_pattern is None or fnmatch.fnmatch(job_name(j), name_pattern))
            and (host_filter is None or j["host"] == host_filter)])
        fleet[:] = reply.fleet
        return jobs, reply.hosts, reply.now

    if as_json:
        context.echo_json(fetch()[0])
        return
    if not expand:
        plain = fetch

        def fetch() -> tuple[list[Row], list[dict[str, Any]], float]:
            jobs, hosts, now = plain()
            return collapse(jobs), hosts, now

    console = _console()
    if not watch:
        jobs, hosts, now = fetch()
        console.print(_view(jobs, hosts, now, columns, fleet), soft_wrap=False)
        elsewhere = context.agent_elsewhere()
        if elsewhere:
            click.echo(elsewhere, err=True)
        return
    from rich.live import Live

    with Live(console=console, auto_refresh=False, screen=False) as live:
        try:
            while True:
                jobs, hosts, now = fetch()
                live.update(_view(jobs, hosts, now, columns, fleet), refresh=True)
                time.sleep(2.0)
        except KeyboardInterrupt:
            return


def collapse(jobs: list[Row]) -> list[Row]:
    """The waiting tasks of an array as one row, `12_[3-99]` (as squeue shows them)."""
    from tpuq.arrays import compress

    out: list[Row] = []
    rows: dict[tuple[int, str], Row] = {}
    for j in jobs:
        array_id = j["array_id"]
        if array_id is None or j["state"] not in WAITING:
            out.append(j)
            continue
        key = (array_id, j["state"])
        row = rows.get(key)
        if row is None:
            row = rows[key] = cast("Row", {**j, "tasks": []})
            out.append(row)
        row["tasks"].extend(j.get("tasks") or [cast(int, j["array_index"])])  # folded
    for row in rows.values():
        row["shown_id"] = f"{row['array_id']}_[{compress(row['tasks'])}]"
    return out


def _console() -> Any:
    from rich.console import Console

    width = os.environ.get("COLUMNS")
    if width and width.isdigit():
        return Console(width=int(width), highlight=False)
    if sys.stdout.isatty():
        return Console(highlight=False)
    return Console(width=PIPE_WIDTH, highlight=False)


def _view(jobs: list[Row], hosts: list[dict[str, Any]], now: float,
          columns: Sequence[str], fleet: Sequence[str] = ()) -> Any:
    from rich.console import Group
    from rich.text import Text

    top = _jobs_table(jobs, now, columns) if jobs else Text("no jobs")
    bottom = _hosts_table(hosts, now) if hosts else \
        Text("no hosts: start one with `tpuq agent`")
    over = [Text(f"logs over budget: {o['says']}") for h in hosts
            for o in h.get("logs_over_budget") or ()]
    if not fleet:
        return Group(top, Text(""), bottom, *over)
    # the fleet's VMs that are not ready, and what each waits for
    return Group(top, Text(""), bottom, *over, Text(""), Text("fleet:"),
                 *(Text(f"  {line}") for line in fleet))


CAPS = {"NAME": 28, "USER": 16, "TEAM": 16, "HOST": 20, "PROGRESS": 30, "COMMAND": 60,
        "JOBS": 24}
GAP = 2  # spaces between columns
MIN_FLEX = 12  # the flexible column (REASON, STATE of a host) is dropped below this


def _layout(headers: Sequence[str], rows: Sequence[Sequence[str]], flexible: str,
            width: int) -> list[tuple[str, int]]:
    """(header, width) of the columns that fit in `width`: each at its natural width
    (capped), the flexible one taking the rest; columns are dropped from the right
    when even that does not fit (the first always stays)."""
    natural = [min(max([len(h)] + [len(r[i]) for r in rows]), CAPS.get(h, 10**6))
               for i, h in enumerate(headers)]
    cols = list(zip(headers, natural, strict=True))
    while True:
        fixed = sum(w for h, w in cols if h != flexible) + GAP * (len(cols) - 1)
        room = width - fixed
        flex = [i for i, (h, _) in enumerate(cols) if h == flexible]
        if flex and room >= MIN_FLEX:
            i = flex[0]
            cols[i] = (flexible, min(cols[i][1], room))
            return cols
        if not flex and room >= 0 or len(cols) == 1:
            return cols
        cols.pop()


def _table(headers: list[str], rows: Sequence[Sequence[str]], flexible: str,
           styles: Sequence[str | None] = ()) -> Any:
    """The rows laid out by `_layout`, one Rich `Text` per line: Rich measures, cuts
    (with an ellipsis) and pads each cell by its terminal width; its Table layout,
    which would measure every cell again, cost a millisecond per row."""
    from rich.console import Group

    cols = _layout(headers, rows, flexible, _console().width)
    shown = [h for h, _ in cols]
    keep = [headers.index(h) for h in shown]
    widths = [w for _, w in cols]
    state = shown.index("STATE") if "STATE" in shown else -1  # the one coloured cell
    lines = [_line(shown, widths, "bold")]
    for n, row in enumerate(rows):
        lines.append(_line([row[i] for i in keep], widths, None, state,
                           (styles[n] if n < len(styles) else None) or ""))
    return Group(*lines)


def _line(cells: Sequence[str], widths: Sequence[int], style: str | None,
          styled: int = -1, cell_style: str = "") -> Any:
    """One row; cell `styled` gets `cell_style`."""
    from rich.text import Text

    line = Text(style=style or "", no_wrap=True, overflow="ellipsis", end="\n")
    last = len(cells) - 1
    for i, (value, width) in enumerate(zip(cells, widths, strict=True)):
        cell = Text(value, style=cell_style if i == styled else "")  # plain text, never markup
        cell.truncate(width, overflow="ellipsis", pad=i < last)
        line.append_text(cell)
        if i < last:
            line.append(" " * GAP)
    return line


def _flat(value: str) -> str:
    # one line per row: a multi-line `python -c '...'` must not break the table
    return " ".join(value.split())


def _jobs_table(jobs: list[Row], now: float, columns: Sequence[str]) -> Any:
    headers = [COLUMNS[c][0] for c in columns]
    rows = [[_flat(COLUMNS[c][1](j, now)) for c in columns] for j in jobs]
    styles = [COLOURS.get(shown_state(j)) for j in jobs]
    return _table(headers, rows, "REASON" if "reason" in columns else "COMMAND", styles)


def _hosts_table(hosts: list[dict[str, Any]], now: float) -> Any:
    # a slice's workers together, in worker order, each named with its slice and number
    hosts = sorted(hosts, key=lambda h: (h.get("slice") or h["name"], h.get("worker") or 0))
    rows = [[_flat(v) for v in (h["name"], f"{h['slice_type']} {h['slice']} w{h['worker']}"
                                 if h.get("slice") else h["tpu_type"] or "?",
                                 f"{h['used']}/{len(h['chips'])}",
                                 ",".join(map(str, h["jobs"])) or "-",
                                 render.ago(h["heartbeat_at"], now), _host_state(h))]
            for h in hosts]
    return _table(["HOST", "TYPE", "CHIPS", "JOBS", "HEARTBEAT", "STATE"], rows, "STATE")


def _host_state(h: dict[str, Any]) -> str:
    """The host's state, and the chip shapes it does not offer with why (a probe's error)."""
    withheld = {k: v for k, v in (h.get("unavailable") or {}).items() if k.isdigit()}
    if not withheld:
        return str(h["state"])
    said = "; ".join(f"{k}-chip jobs unavailable: {v}" for k, v in sorted(
        withheld.items(), key=lambda kv: int(kv[0])))
    return f"{h['state']}; {said}"


COMMANDS = [status]
