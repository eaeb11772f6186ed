"""`tpuq quota`: teams' chips and chip-hours against their limits; `quota set` for admins."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import click

from tpuq.cli import context, render
from tpuq.cli.args import words_option
from tpuq.cli.errors import UserError

BAR_WIDTH = 24
PERIOD_NAMES = {"day": "today", "week": "this week", "month": "this month"}


@click.group(invoke_without_command=True)
@context.json_option
@click.pass_context
def quota(ctx: click.Context, as_json: bool) -> None:
    """Show each team's chips in use and chip-hours this period against its limits.

    \b
      tpuq quota                                   bars per team, burn rate, grant expiry
      tpuq quota set vision --max-chips 8 --budget 500 --period week
      tpuq quota add-member vision alice
    """
    if ctx.invoked_subcommand is not None:
        return
    from tpuq.protocol import QuotaReport, Rows

    rows = context.ask(QuotaReport(), Rows).rows
    if as_json:
        context.echo_json(rows)
        return
    click.echo("\n\n".join(_team_text(r) for r in rows) if rows else
               "no teams yet: `tpuq quota set TEAM --max-chips N` configures one")


def _bar(used: float, limit: float | None) -> str:
    if not limit:
        return "[" + " " * BAR_WIDTH + "]"
    filled = min(BAR_WIDTH, round(BAR_WIDTH * max(0.0, used) / limit))
    return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"


def _num(x: float) -> str:
    return f"{x:.1f}" if x < 100 else f"{x:.0f}"


def _on_cap(key: str, by_type: dict[str, int]) -> int:
    from tpuq.scheduler.quota import cap_matches

    return sum(n for t, n in by_type.items() if cap_matches(key, t))


def _team_text(r: dict[str, Any]) -> str:
    lines = [f"{r['team']}  (share {r['share']:g}; members: {', '.join(r['members']) or '-'})"]
    mx = r["max_chips"]
    caps = [f"{k} {_on_cap(k, r['chips_by_type'])}/{v}"
            for k, v in sorted(r["max_chips_by_type"].items())]
    extra = "; ".join([*caps, *([f"per user <= {r['max_chips_per_user']}"]
                                if r["max_chips_per_user"] is not None else [])])
    lines.append(f"  chips   {_bar(r['chips'], mx)} {r['chips']}/{mx if mx is not None else '-'}"
                 + (f"  ({extra})" if extra else ""))
    budget, used = r["budget_chip_hours"], r["used_chip_hours"]
    when = PERIOD_NAMES.get(r["budget_period"], r["budget_period"])
    if budget is None:
        lines.append(f"  budget  {_bar(used, None)} {_num(used)} chip-hours {when}, no budget")
    else:
        resets = time.strftime("%a %d %b %H:%M", time.localtime(r["budget_resets_at"]))
        lines.append(f"  budget  {_bar(used, budget)} {_num(used)}/{_num(budget)} chip-hours "
                     f"{when}, resets {resets}")
    burn = r["burn_chip_hours_24h"]
    line = f"  burn    {_num(burn)} chip-hours in the last 24 h"
    if r["budget_lasts_days"] is not None:
        line += f": budget lasts ~{r['budget_lasts_days']:.1f} days at this rate"
    lines.append(line)
    if r["grant_expires_at"] is not None:
        left = r["grant_expires_at"] - r["now"]
        state = f"in {render.duration(left)}" if left > 0 else "EXPIRED"
        day = time.strftime("%Y-%m-%d", time.localtime(r["grant_expires_at"]))
        lines.append(f"  grant   expires {day} ({state})")
    return "\n".join(lines)


# ---- changing quotas (admins: tpuq admin) ---------------------------------------------------

def _limit(value: str | None, what: str, kind: type = int) -> Any:
    """'8' -> 8, 'none' -> None (clears the limit)."""
    if value is None or value.lower() in ("none", "off", "unlimited"):
        return None
    try:
        return kind(value)
    except ValueError:
        raise UserError(f"{what} must be a number or 'none', got {value!r}") from None


def _type_caps(items: tuple[str, ...]) -> dict[str, int]:
    caps: dict[str, int] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key or not value.isdigit():
            raise UserError(f"bad --max-chips-type {item!r}: expected TYPE=N, e.g. v4=8")
        caps[key] = int(value)
    return caps


def _date(text: str | None) -> float | None:
    if text is None or text.lower() == "none":
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%d").timestamp()
    except ValueError:
        raise UserError(f"bad --grant-expires {text!r}: expected YYYY-MM-DD or 'none'") from None


@quota.command("set")
@click.argument("team")
@click.option("--share", type=float, help="Fair-share weight (default 1).")
@click.option("--max-chips", help="Concurrent chips of the team ('none' clears).")
@click.option("--max-chips-per-user", help="Concurrent chips per member ('none' clears).")
@words_option("--max-chips-type", "type_caps", metavar="TYPE=N[,TYPE=N]",
              help="Concurrent chips per TPU type or family, e.g. v4=8,v5e=16 (repeatable, "
                   "or comma-separated; replaces all per-type caps; 'none' clears them).")
@click.option("--budget", help="Chip-hours per period ('none' clears).")
@click.option("--period", type=click.Choice(["day", "week", "month"]),
              help="Budget period: day, week (from Monday 00:00) or month.")
@click.option("--grant-expires", help="Date the grant ends, YYYY-MM-DD ('none' clears).")
@context.json_option
def set_quota(team: str, share: float | None, max_chips: str | None,
              max_chips_per_user: str | None, type_caps: tuple[str, ...], budget: str | None,
              period: str | None, grant_expires: str | None, as_json: bool) -> None:
    """Set a team's share and limits (admins only). Only the options given change."""
    from tpuq.protocol import QuotaSet, Rows

    values: dict[str, Any] = {}
    if share is not None:
        values["share"] = share
    if max_chips is not None:
        values["max_chips"] = _limit(max_chips, "--max-chips")
    if max_chips_per_user is not None:
        values["max_chips_per_user"] = _limit(max_chips_per_user, "--max-chips-per-user")
    if type_caps:
        values["max_chips_by_type"] = {} if type_caps == ("none",) else _type_caps(type_caps)
    if budget is not None:
        values["budget_chip_hours"] = _limit(budget, "--budget", float)
    if period is not None:
        values["budget_period"] = period
    if grant_expires is not None:
        values["grant_expires_at"] = _date(grant_expires)
    # limits changed: the agents are woken, the scheduler may start (or hold back) jobs now
    (row,) = context.ask(QuotaSet(team=team, values=values), Rows).rows
    if as_json:
        context.echo_json(row)
    else:
        click.echo(f"team {team}: " + "; ".join(
            f"{k.replace('_', ' ')} {_shown(v, k)}" for k, v in row.items() if k != "team"))


def _shown(value: Any, key: str = "") -> str:
    if value is None:
        return "none"
    if key.endswith("_at"):
        return time.strftime("%Y-%m-%d", time.localtime(value))
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in sorted(value.items())) or "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


@quota.command("add-member")
@click.argument("team")
@click.argument("user")
def add_member(team: str, user: str) -> None:
    """Add USER to TEAM (admins only); creates the team if needed."""
    from tpuq.protocol import Done, Membership

    click.echo(context.ask(Membership(team=team, user=user, member=True), Done).message)


@quota.command("remove-member")
@click.argument("team")
@click.argument("user")
def remove_member(team: str, user: str) -> None:
    """Remove USER from TEAM (admins only)."""
    from tpuq.protocol import Done, Membership

    click.echo(context.ask(Membership(team=team, user=user, member=False), Done).message)


COMMANDS = [quota]
