"""`tpuq agent`, `tpuq db ...`, `tpuq config`: running and operating tpuq itself."""

from __future__ import annotations

import sys
from typing import Any

import click

from tpuq.cli import context
from tpuq.cli.errors import Refused, Unavailable, UserError


@click.command()
@click.option("--host", envvar="TPUQ_HOST", help="This host's name (default: hostname).")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def agent(host: str | None, verbose: bool) -> None:
    """Run the host agent in the foreground (one per TPU VM).

    It finds the TPU chips, runs queued jobs as the only owner of their chips, and
    (embedded deployment) schedules too. Ctrl-C or SIGTERM: running jobs get their stop
    signal and grace period and are requeued; a second Ctrl-C kills them at once.
    """
    import logging

    from tpuq.agent.errors import EXIT_UNFIT, HostUnfit
    from tpuq.agent.main import Agent, AgentError, socket_has_agent
    from tpuq.agent.signals import StopSignals, reset_signals

    reset_signals()
    signals = StopSignals().install()  # before anything starts: an early SIGTERM counts
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    cfg = context.settings()
    if host:
        cfg = cfg.replace(host=host)
    if cfg.embedded and socket_has_agent(cfg.socket_path):
        raise Unavailable(f"an agent already answers on {cfg.socket_path}")
    db = context.database(cfg)
    try:
        a = Agent(cfg, db)
        a.start()
    except HostUnfit as e:  # a restart changes nothing: a status systemd does not restart
        click.echo(f"tpuq: error: {e}", err=True)
        sys.exit(EXIT_UNFIT)
    except AgentError as e:
        raise Unavailable(str(e)) from None
    sys.exit(a.run_until_stopped(signals))


@click.group()
def db() -> None:
    """Database schema: `tpuq db upgrade` applies the migrations, `tpuq db downgrade REV`
    takes them back (docs/upgrading.md)."""


@db.command()
def upgrade() -> None:
    """Apply every migration this tpuq has to the configured database. The team
    deployment runs it once, from any machine, while the old agents run; then hands each
    host's agent over (docs/upgrading.md)."""
    from tpuq.state.db import SCHEMA_HEAD, Database

    database = Database(context.settings().db_url)
    before = database.refuse_if_too_new()
    if before.newer_than(SCHEMA_HEAD):
        click.echo(f"{database.safe_url}: at schema {before.revision}, newer than this tpuq "
                   f"(schema {SCHEMA_HEAD}), which it admits: nothing to do")
        return
    database.upgrade()
    click.echo(f"{database.safe_url}: {before.revision or 'empty'} -> {SCHEMA_HEAD}")


@db.command()
def current() -> None:
    """Print the database's schema revision and the one this tpuq needs."""
    from tpuq.state.db import SCHEMA_HEAD, Database

    database = Database(context.settings().db_url)
    schema = database.refuse_if_too_new()
    if schema.revision is None:
        raise Unavailable(f"{database.safe_url}: no tpuq schema, tpuq needs {SCHEMA_HEAD}: "
                          "run `tpuq db upgrade`")
    if schema.newer_than(SCHEMA_HEAD):
        click.echo(f"{database.safe_url}: at {schema.revision}, newer than this tpuq (schema "
                   f"{SCHEMA_HEAD}), which it admits (tpuq of schema {schema.min_code} or later)")
        return
    click.echo(f"{database.safe_url}: at {schema.revision}, tpuq needs {SCHEMA_HEAD}"
               + ("" if schema.revision == SCHEMA_HEAD else ": run `tpuq db upgrade`"))
    if schema.revision != SCHEMA_HEAD:
        sys.exit(1)


@db.command()
@click.argument("revision")
@click.option("--force", is_flag=True,
              help="Also drop the records of ended work it lists (never open work).")
def downgrade(revision: str, force: bool) -> None:
    """Take the database back to schema REVISION, to go back to the tpuq release that
    needs it (that release's `tpuq db current` names it). Stop every agent first (kill
    -USR2: their jobs run on, and the agents started after adopt them). Refused, saying
    why, while open work would be lost or run wrongly under the older schema (open array
    tasks under a schema without arrays, say) or agents still run; records of ended work
    it would drop are dropped only with --force."""
    from tpuq.state import migrate
    from tpuq.state.db import Database

    cfg = context.settings()
    database = Database(cfg.db_url)
    at = _refuse_downgrade(database, revision, cfg.host_stale_s, force)
    migrate.downgrade(database.engine, revision)
    click.echo(f"{database.safe_url}: {at} -> {revision}; start only agents of the tpuq that "
               f"needs schema {revision}")


def _refuse_downgrade(database: Any, revision: str, stale_s: float, force: bool) -> str:
    """Raise the one line that says why going down to `revision` is refused; else the
    revision the database is at."""
    from tpuq.protocol import Failure
    from tpuq.state import hosts, migrate
    from tpuq.state.db import SCHEMA_HEAD
    from tpuq.state.versions import rank

    schema = database.schema()
    if schema.revision is None:
        raise Unavailable(f"{database.safe_url}: no tpuq schema to downgrade")
    if schema.newer_than(SCHEMA_HEAD):
        raise Unavailable(f"{database.safe_url} is at schema {schema.revision}, newer than this "
                          f"tpuq (schema {SCHEMA_HEAD}): downgrade it with the tpuq that "
                          "upgraded it")
    if not (revision.isdigit() and migrate.known(revision)) \
            or rank(revision) >= rank(schema.revision):
        raise UserError(f"{revision!r} is not a schema older than the database's "
                        f"({schema.revision}); `tpuq db current` with the release to go back "
                        "to names the one it needs")
    with database.engine.connect() as c:
        live = hosts.live_agents(c, stale_s)
        loses, drops = migrate.downgrade_costs(c, schema.revision, revision)
    if live:
        raise Refused(Failure.CONFLICT, f"agents run on {', '.join(live)}: stop them first "
                      "(kill -USR2 <agent pid> keeps their jobs running), then wait until "
                      "`tpuq status` shows them silent or stopped")
    if loses:
        raise Refused(Failure.CONFLICT, f"going down to {revision} would lose "
                      f"{'; '.join(loses)}: let that work end, or cancel it, first")
    if drops and not force:
        raise Refused(Failure.CONFLICT, f"going down to {revision} drops {'; '.join(drops)}: "
                      "run again with --force to drop them")
    return str(schema.revision)


@click.command()
@context.json_option
def config(as_json: bool) -> None:
    """Show each setting's value in effect, where it came from (default, the system's
    config file, the user's, an environment variable) and the variable that sets it; a
    path left empty shows the one derived from TPUQ_HOME. Then the files tpuq reads and
    the agents running on this VM. Passwords are masked."""
    import os

    from tpuq import announce
    from tpuq.cli.render import table
    from tpuq.settings import ENV, load_with_sources, system_config_file, user_config_file

    cfg, sources = load_with_sources()
    values = _shown_values(cfg)
    derived = {k: v for k, v in cfg.in_effect().items() if values[k] in ("", None)}
    for name, value in derived.items():
        values[name] = masked(value)
        sources[name] = f"{sources[name]} (derived)"
    env = dict(os.environ)
    files = {"system config": _file_state(system_config_file(env)),
             "user config": _file_state(user_config_file(env, cfg.home))}
    agents = announce.others(cfg, include_own=True)
    if as_json:
        context.echo_json({name: {"value": values[name], "source": sources[name],
                                  "variable": var} for name, var in ENV.items()}
                          | {"config_files": files, "agents_here": agents})
        return
    rows = [(name, "(none)" if values[name] in ("", None) else values[name], sources[name], var)
            for name, var in ENV.items()]
    click.echo(table(("SETTING", "VALUE", "FROM", "VARIABLE"), rows, max_last=40))
    click.echo("")
    for what, state in files.items():
        click.echo(f"{what}: {state['path']} ({state['state']})")
    click.echo("read in this order, each over the one before; then TPUQ_* variables "
               "(TPUQ_SYSTEM_CONFIG, TPUQ_CONFIG move the files)")
    for a in agents:
        click.echo(f"agent on this VM: {announce.describe(a)}")


def _shown_values(cfg: Any) -> dict[str, Any]:
    values = {k: masked(v) if isinstance(v, str) else v for k, v in cfg.as_dict().items()}
    values["notify_to"] = " ".join(f"{u.split('://', 1)[0]}://***" for u in cfg.notify_to.split())
    for name in SECRETS:
        if values[name]:
            values[name] = "***"
    return values


def _file_state(path: str) -> dict[str, str]:
    from tpuq.settings import is_file

    try:
        state = "read" if is_file(path) else "absent"
    except OSError as e:
        state = f"unreadable: {e.strerror}"
    return {"path": path, "state": state}


# settings that are secrets whole: shown as *** when set
SECRETS = ("web_secret", "web_metrics_token")


def masked(value: str) -> str:
    """A setting as it may be shown: a URL's password replaced by ***."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(value)
    except ValueError:
        return value
    if not parts.password:
        return value
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


COMMANDS = [agent, db, config]
