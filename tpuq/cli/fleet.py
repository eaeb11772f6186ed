"""`tpuq fleet`: declare the team's TPU VMs (apply), see them (status), keep them
(controller). The library is tpuq/fleet/; these are thin commands over it."""

from __future__ import annotations

import sys
from typing import Any

import click

from tpuq.cli import context, render
from tpuq.cli.errors import Unavailable, UserError


@click.group()
def fleet() -> None:
    """The team's TPU VMs, declared in a file and kept by a controller.

    \b
      tpuq fleet apply fleet.toml     store the declared slots (admins)
      tpuq fleet status               each VM: ready, or what it waits for; costs
      tpuq fleet controller           keep them (run beside PostgreSQL, not on a VM)
    """


@fleet.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--dry-run", is_flag=True, help="Check the file and say what it declares.")
def apply(file: str, dry_run: bool) -> None:
    """Store the slots FILE declares (TOML, docs/fleet.md). Slots no longer in it have
    their VMs deleted by the controller; nothing is created by this command itself."""
    from tpuq.fleet import spec

    declared = spec.load(file)
    for sl in declared.slots:
        click.echo(f"{sl.name}: {sl.count} x {sl.describe()} in {sl.project}/{sl.zone} "
                   f"({sl.chips} chips each)")
    if dry_run:
        return
    from tpuq.fleet import store

    cfg = context.settings()
    try:
        with context.database(cfg).write() as s:
            done = store.apply(s, declared, cfg.user_name)
    except ValueError as e:
        raise UserError(str(e)) from None
    except Exception as e:
        # PostgreSQL's row security: only admins change the declared slots (migration 0014)
        if "row-level security" in str(e) or "permission denied" in str(e):
            raise UserError(f"{cfg.user_name} may not change the fleet: admins only "
                            "(`tpuq admin add NAME`)") from None
        raise
    for word, names in (("added", done.added), ("changed", done.changed),
                        ("removed (its VMs will be deleted)", done.removed),
                        ("unchanged", done.kept)):
        if names:
            click.echo(f"{word}: {', '.join(names)}")


@fleet.command()
@click.option("--since", default="30d", show_default=True,
              help="Costs from this far back: a duration ago (30d) or a date.")
@context.json_option
def status(since: str, as_json: bool) -> None:
    """Each declared VM: ready, or what it waits for since when and after how many
    tries; the controller; chip-hours provisioned against used by jobs (idle)."""
    from tpuq.cli.history import _since
    from tpuq.protocol import FleetReport, FleetView

    reply = context.ask(FleetReport(since=_since(since, "'--since'")), FleetView)
    if as_json:
        context.echo_json({**reply.view, "costs": reply.costs})
        return
    click.echo("\n".join(lines(reply.view, reply.costs, since)))


def lines(view: dict[str, Any], costs: list[dict[str, Any]], since: str) -> list[str]:
    if not view.get("slots"):
        return ["no fleet: declare slots with `tpuq fleet apply FILE` (docs/fleet.md)"]
    out = []
    ready: dict[str, int] = {}
    for m in view["members"]:
        ready[m["slot"]] = ready.get(m["slot"], 0) + int(m["ready"])
    cost = {c["slot"]: c for c in costs}
    rows = []
    for sl in view["slots"]:
        c = cost.get(sl["name"], {})
        kind = f"{sl['accelerator_type']} {sl['capacity']}" + (" queued" if sl["queued"] else "")
        rows.append((sl["name"], kind, f"{sl['project']}/{sl['zone']}",
                     "removed" if sl["removed"] else f"{ready.get(sl['name'], 0)}/{sl['count']}",
                     *_cost_cells(c)))
    out.append(render.table(("SLOT", "KIND", "WHERE", "READY", "PROVISIONED", "USED", "IDLE"),
                            rows))
    out.append("")
    out += [f"  {m['line']}  [{m['node']}]" for m in view["members"]]
    total = cost.get("total")
    if total:
        out.append("")
        p, u, i = _cost_cells(total)
        out.append(f"last {since}: {p} chip-hours provisioned, {u} used by jobs, {i} idle")
    who = view.get("controller")
    out.append(f"controller: {who}" if who else
               "controller: none leads: start `tpuq fleet controller` (docs/fleet.md)")
    return out


def _cost_cells(c: dict[str, Any]) -> tuple[str, str, str]:
    if not c:
        return "-", "-", "-"
    idle = f"{c['idle_chip_hours']:.1f}"
    if c["idle_fraction"] is not None:
        idle += f" ({c['idle_fraction']:.0%})"
    return f"{c['provisioned_chip_hours']:.1f}", f"{c['used_chip_hours']:.1f}", idle


@fleet.command()
@click.option("--once", is_flag=True, help="One step, then exit (if this one leads).")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def controller(once: bool, verbose: bool) -> None:
    """Keep the declared VMs: make what is missing, delete what is dead and make it
    anew, requeue the jobs of a lost VM at once. Runs in the foreground (a service:
    docker-compose.yml, workers/tpuq-fleet.service); one leads at a time."""
    import logging
    import os
    import signal
    import socket
    import threading

    stop = threading.Event()  # the handler only sets it; the loop stops between steps
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    cfg = context.settings()
    if cfg.embedded:
        raise UserError("the fleet controller serves a team deployment: set TPUQ_DATABASE_URL "
                        "and TPUQ_BROKER_URL (its VMs' agents join them)")
    c = build(cfg, holder=f"{socket.gethostname()}:{os.getpid()}")
    if once:
        click.echo(f"{c.step()} calls" if c.keep_lease() else "another controller leads")
        return
    click.echo(f"fleet controller {c.holder}: polling every {cfg.fleet_poll_s:g}s", err=True)
    c.run(stop.is_set)


def build(cfg: Any, holder: str) -> Any:
    """The controller of these settings: the database, the API, what VMs are given."""
    from tpuq.fleet.controller import Boot, Controller
    from tpuq.fleet.gcp import GoogleTpuApi, make_client
    from tpuq.fleet.records import DbRecords

    script = cfg.fleet_startup_script or _shipped_script()
    try:
        with open(script, encoding="utf-8") as f:
            text = f.read()
        client = make_client(cfg.tpu_api_endpoint)
    except (OSError, ValueError) as e:
        raise Unavailable(f"fleet controller: {e}") from None
    boot = Boot(script=text, database_url=cfg.fleet_agent_database_url or cfg.database_url,
                broker_url=cfg.broker_url, pip_spec=cfg.fleet_pip_spec)
    db = context.database(cfg)

    def ring(_: list[int]) -> None:
        from tpuq.state import wakeups

        wakeups.ring(db)  # requeued jobs: every agent, the leader with them, looks at once

    return Controller(DbRecords(db, cfg, holder), cfg, GoogleTpuApi(client), boot,
                      on_requeue=ring)


def _shipped_script() -> str:
    from importlib.resources import files

    return str(files("tpuq.pod") / "startup-script.sh")


COMMANDS = [fleet]
