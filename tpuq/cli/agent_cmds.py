"""`tpuq agent`, `tpuq db ...`, `tpuq config`: running and operating tpuq itself."""

from __future__ import annotations

import sys

import click

from tpuq.cli import context
from tpuq.cli.errors import Unavailable


@click.command()
@click.option("--host", envvar="TPUQ_HOST", help="This host's name (default: hostname).")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def agent(host: str | None, verbose: bool) -> None:
    """Run the host agent in the foreground (one per TPU VM).

    It finds the TPU chips, runs queued jobs as the only owner of their chips, and
    (embedded deployment) schedules too. Ctrl-C or SIGTERM: running jobs get their stop
    signal and grace period and are requeued; a second Ctrl-C kills them at once.
    """
    import dataclasses
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
        cfg = dataclasses.replace(cfg, host=host)
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
    """Database schema: `tpuq db upgrade` applies the migrations."""


@db.command()
def upgrade() -> None:
    """Apply all Alembic migrations to the configured database."""
    from tpuq.state.db import SCHEMA_HEAD, Database

    cfg = context.settings()
    database = Database(cfg.db_url)
    before = database.schema_version()
    database.upgrade()
    click.echo(f"{database.safe_url}: {before or 'empty'} -> {SCHEMA_HEAD}")


@db.command()
def current() -> None:
    """Print the database's schema revision and the one this tpuq needs."""
    from tpuq.cli.errors import Unavailable
    from tpuq.state.db import SCHEMA_HEAD, Database

    database = Database(context.settings().db_url)
    version = database.schema_version()
    if version is None:
        raise Unavailable(f"{database.safe_url}: no tpuq schema, tpuq needs {SCHEMA_HEAD}: "
                          "run `tpuq db upgrade`")
    click.echo(f"{database.safe_url}: at {version}, tpuq needs {SCHEMA_HEAD}"
               + ("" if version == SCHEMA_HEAD else ": run `tpuq db upgrade`"))
    if version != SCHEMA_HEAD:
        sys.exit(1)


@click.command()
@context.json_option
def config(as_json: bool) -> None:
    """Show each setting's value in effect, where it came from (default, the config file,
    an environment variable) and the variable that sets it. Passwords are masked."""
    import dataclasses

    from tpuq.cli.render import table
    from tpuq.settings import CONFIG_ENV, ENV, load_with_sources

    cfg, sources = load_with_sources()
    values = {k: masked(v) if isinstance(v, str) else v for k, v in dataclasses.asdict(cfg).items()}
    values["notify_to"] = " ".join(f"{u.split('://', 1)[0]}://***" for u in cfg.notify_to.split())
    if not cfg.database_url:
        values["database_url"] = f"{masked(cfg.db_url)} (embedded)"
    if as_json:
        context.echo_json({name: {"value": values[name], "source": sources[name],
                                  "variable": var} for name, var in ENV.items()})
        return
    rows = [(name, "(none)" if values[name] in ("", None) else values[name], sources[name], var)
            for name, var in ENV.items()]
    click.echo(table(("SETTING", "VALUE", "FROM", "VARIABLE"), rows, max_last=40))
    click.echo(f"\nconfig file: ${CONFIG_ENV}, else $TPUQ_HOME/config.toml (keys as SETTING)")


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
