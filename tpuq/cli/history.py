"""`tpuq history`: ended jobs over a period, as SLURM's sacct, with what they cost."""

from __future__ import annotations

import csv
import sys
import time
from typing import Any, TypedDict

import click

from tpuq.cli import context, render
from tpuq.cli.args import words_option
from tpuq.cli.status import job_name
from tpuq.jobjson import Duration, Time, iso_time
from tpuq.spec import SpecError, format_duration, parse_duration
from tpuq.state.states import TERMINAL, in_order

ENDED = in_order(TERMINAL)


class Ended(TypedDict):
    """A row of `history --json` and `--csv`: every value filled, times in ISO 8601 (UTC),
    durations as options take them (`1h30m`)."""

    id: int
    name: str  # its --name, else its script's (or command's) file name
    command: list[str]
    owner: str
    team: str
    state: str
    chips: int | None  # a whole-host job: the host's count (None: it never got a host)
    whole_host: bool
    tpu_type: str | None
    attempts: int
    submitted_at: Time
    ended_at: Time
    runtime: Duration
    chip_hours: float
    chip_hours_not_charged: float


CSV_FIELDS = tuple(k for k in Ended.__annotations__ if k != "command")


def ended_row(r: dict[str, Any]) -> Ended:
    """A History reply's row for scripts."""
    whole = r["chips"] is None
    return {"id": r["id"], "name": job_name(r), "command": r["command"], "owner": r["owner"],
            "team": r["team"], "state": r["state"],
            "chips": r.get("chips_held") if whole else r["chips"], "whole_host": whole,
            "tpu_type": r["tpu_type"], "attempts": r["attempts"],
            "submitted_at": iso_time(r["submitted_at"]) or "",
            "ended_at": iso_time(r["ended_at"]) or "",
            "runtime": format_duration(r["runtime_s"]), "chip_hours": r["chip_hours"],
            "chip_hours_not_charged": r["chip_hours_not_charged"]}


def _since(value: str | None, option: str) -> float | None:
    """`1d` (ago) or an absolute `YYYY-MM-DD[ HH:MM]`, as epoch seconds."""
    if value is None:
        return None
    for fmt in ("%Y-%m-%d %H:%M", "%Y-%m-%d"):
        try:
            return time.mktime(time.strptime(value, fmt))
        except ValueError:
            pass
    try:
        return time.time() - parse_duration(value)
    except SpecError:
        raise click.BadParameter(f"{value!r}: a duration ago (e.g. 7d) or a date "
                                 "(YYYY-MM-DD[ HH:MM])", param_hint=option) from None


@click.command()
@click.option("--since", default="7d", show_default=True,
              help="Jobs that ended after this: a duration ago (7d, 12h) or a date.")
@click.option("--until", help="...and before this (same forms).")
@click.option("--user", help="Only this user's jobs.")
@click.option("--team", help="Only this team's jobs.")
@words_option("--state", "states", choices=ENDED,
              help="Only jobs that ended so (repeatable, or comma-separated).")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV for spreadsheets.")
@context.json_option
def history(since: str, until: str | None, user: str | None, team: str | None,
            states: tuple[str, ...], as_csv: bool, as_json: bool) -> None:
    """Ended jobs over a period, with runtime, chips, and chip-hours charged and not
    charged (preemptions, host errors), like sacct.

    \b
      tpuq history --since 30d --user alice --csv > alice.csv
      tpuq history --state failed,timeout --json

    With --json or --csv, one row per job: id, name, owner, team, state, chips (a
    whole-host job: its host's count), whole_host, tpu_type, attempts, submitted_at and
    ended_at (ISO 8601, UTC), runtime (as options take it: 1h30m), chip_hours,
    chip_hours_not_charged; --json adds command.
    """
    from tpuq.protocol import History, Rows

    rows = context.ask(History(since=_since(since, "'--since'"),
                               until=_since(until, "'--until'"), user=user, team=team,
                               states=list(states)), Rows).rows
    if as_json:
        context.echo_json([ended_row(r) for r in rows])
        return
    if as_csv:
        out = csv.DictWriter(sys.stdout, fieldnames=CSV_FIELDS, extrasaction="ignore")
        out.writeheader()
        out.writerows(ended_row(r) for r in rows)
        return
    if not rows:
        click.echo("no jobs ended then")
        return
    table = [(r["id"], job_name(r), r["owner"], r["team"], r["state"],
              "all" if r["chips"] is None else r["chips"], r["attempts"],
              render.duration(r["runtime_s"]), f"{r['chip_hours']:.2f}",
              f"{r['chip_hours_not_charged']:.2f}", render.clock(r["ended_at"]))
             for r in rows]
    click.echo(render.table(("ID", "NAME", "USER", "TEAM", "STATE", "CHIPS", "TRIES",
                             "RUNTIME", "CHIP-H", "NOT CHARGED", "ENDED"), table))
    total = sum(r["chip_hours"] for r in rows)
    free = sum(r["chip_hours_not_charged"] for r in rows)
    click.echo(f"\n{len(rows)} jobs, {total:.2f} chip-hours charged, {free:.2f} not charged")


@click.command()
@click.option("--since", default="30d", show_default=True,
              help="Jobs that ended after this: a duration ago (30d) or a date.")
@click.option("--until", help="...and before this (same forms).")
@click.option("--by", type=click.Choice(("user", "team")), default="user", show_default=True,
              help="Totals per user or per team.")
@context.json_option
def usage(since: str, until: str | None, by: str, as_json: bool) -> None:
    """Chip-hours per user (or team) over a period: jobs ended, chip-hours charged and
    not charged (from the same records as `tpuq history`).

    With --json, one row per user (or team): user (or team), jobs, chip_hours,
    chip_hours_not_charged, runtime (as options take it: 1h30m).
    """
    from tpuq.protocol import History, Rows

    rows = context.ask(History(since=_since(since, "'--since'"),
                               until=_since(until, "'--until'")), Rows).rows
    key = "owner" if by == "user" else "team"
    totals: dict[str, dict[str, float]] = {}
    for r in rows:
        t = totals.setdefault(r[key], {"jobs": 0, "chip_hours": 0.0,
                                       "chip_hours_not_charged": 0.0, "runtime_s": 0.0})
        t["jobs"] += 1
        for k in ("chip_hours", "chip_hours_not_charged", "runtime_s"):
            t[k] += r[k]
    ordered = sorted(totals.items(), key=lambda kv: -kv[1]["chip_hours"])
    if as_json:
        context.echo_json([{by: name, "jobs": int(t["jobs"]), "chip_hours": t["chip_hours"],
                            "chip_hours_not_charged": t["chip_hours_not_charged"],
                            "runtime": format_duration(t["runtime_s"])}
                           for name, t in ordered])
        return
    if not ordered:
        click.echo("no jobs ended then")
    else:
        click.echo(render.table((by.upper(), "JOBS", "CHIP-H", "NOT CHARGED", "RUNTIME"),
                                [(name, int(t["jobs"]), f"{t['chip_hours']:.2f}",
                                  f"{t['chip_hours_not_charged']:.2f}",
                                  render.duration(t["runtime_s"])) for name, t in ordered]))
    _fleet_costs(_since(since, "'--since'"), _since(until, "'--until'"))


def _fleet_costs(since: float | None, until: float | None) -> None:
    """What the fleet's VMs cost over the same period against what jobs used of them."""
    from tpuq.protocol import FleetReport, FleetView

    reply = context.ask(FleetReport(since=since, until=until), FleetView)
    if not reply.view.get("slots"):
        return
    rows = [(c["slot"], f"{c['provisioned_chip_hours']:.2f}", f"{c['used_chip_hours']:.2f}",
             f"{c['idle_chip_hours']:.2f}",
             "-" if c["idle_fraction"] is None else f"{c['idle_fraction']:.0%}")
            for c in reply.costs]
    click.echo("\nfleet (chip-hours of its VMs, used by any job while running on them):")
    click.echo(render.table(("SLOT", "PROVISIONED", "USED", "IDLE", "IDLE %"), rows))


COMMANDS = [history, usage]
