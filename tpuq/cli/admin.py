"""Who may do what: `tpuq whoami`, `tpuq admin add/remove`, `tpuq user add`."""

from __future__ import annotations

import sys
from typing import Any

import click

from tpuq.cli import context
from tpuq.cli.errors import UserError


@click.command()
@context.json_option
def whoami(as_json: bool) -> None:
    """Who tpuq takes you for (the kernel's or the database's word), and whether admin."""
    from tpuq.protocol import Identity, WhoAmI

    me = context.ask(WhoAmI(), Identity)
    if as_json:
        context.echo_json({"user": me.user, "admin": me.admin})
    else:
        click.echo(f"{me.user}{' (admin)' if me.admin else ''}")


@click.group()
def admin() -> None:
    """Admins change anyone's jobs, hosts, quotas and admins.

    \b
    Named in the deployment's database, never by a caller's environment. On a host,
    root and the agent's own user are admins too: the first admin is made with
    `sudo tpuq admin add NAME`.
    """


@admin.command("add")
@click.argument("user")
def admin_add(user: str) -> None:
    """Make USER an admin (admins only)."""
    from tpuq.protocol import AdminSet, Done

    click.echo(context.ask(AdminSet(user=user, admin=True), Done).message)


@admin.command("remove")
@click.argument("user")
def admin_remove(user: str) -> None:
    """Make USER an admin no more (admins only)."""
    from tpuq.protocol import AdminSet, Done

    click.echo(context.ask(AdminSet(user=user, admin=False), Done).message)


@click.group()
def user() -> None:
    """Login roles and broker accounts for the team deployment (run with the database
    owner's URL, and the broker URL of an account that may manage ACL users)."""


@user.command("add")
@click.argument("name")
@click.option("--agent", is_flag=True, help="A role for host agents (not restricted; "
                                            "agents use the deployment's broker account).")
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin.")
def user_add(name: str, agent: bool, password_stdin: bool) -> None:
    """Create NAME's login role and, for a user, their broker account: they may then use
    tpuq from any machine with their own database and broker URLs, change only their own
    jobs (row-level security) and read only their own jobs' output (docs/security.md)."""
    from tpuq.queue.accounts import password_hash
    from tpuq.state import broker_accounts
    from tpuq.state.roles import RoleError, create_login

    cfg = context.settings()
    password = sys.stdin.readline().rstrip("\n") if password_stdin else None
    try:
        with context.database(cfg).write() as s:
            password = create_login(s, name, agent=agent, password=password)
            if not agent:
                broker_accounts.put(s, name, password_hash(password))
    except RoleError as e:
        raise UserError(str(e)) from None
    click.echo(f"role {name} created ({'agent' if agent else 'user'})")
    if not password_stdin:
        click.echo(f"password: {password}")
    if not agent:
        _broker_account(cfg, name, password, shown=not password_stdin)


def _broker_account(cfg: Any, name: str, password: str, *, shown: bool) -> None:
    """Put NAME's broker account into Redis now (the agents do within a minute anyway)
    and say which broker URL is theirs."""
    from tpuq.queue import accounts, logstream
    from tpuq.state import broker_accounts

    if not cfg.broker_url:
        click.echo("broker account recorded; the agents put it into Redis (no "
                   "TPUQ_BROKER_URL here to show its URL)")
        return
    try:
        with context.database(cfg).read() as s:
            wanted = broker_accounts.all_accounts(s)
        accounts.sync(logstream.client(cfg.broker_url), wanted)
    except Exception as e:  # noqa: BLE001 - the agents make it: say so, in one line
        click.echo(f"broker account recorded; the agents put it into Redis within a minute "
                   f"(not from here: {type(e).__name__}: {str(e).splitlines()[0][:120]})")
    url = accounts.user_url(cfg.broker_url, name, password if shown else "PASSWORD")
    click.echo(f"broker_url: {url}")


@user.command("grant")
@click.argument("name")
def user_grant(name: str) -> None:
    """Let NAME's existing role (made for another deployment on the same PostgreSQL
    server) use this deployment too, with a broker account of this deployment's (its
    password is new: it is shown once). Roles belong to the server, databases do not
    share them unless told."""
    import secrets

    from tpuq.queue.accounts import password_hash
    from tpuq.state import broker_accounts
    from tpuq.state.roles import RoleError, grant_connect, is_agent_role

    cfg = context.settings()
    password = secrets.token_urlsafe(18)
    try:
        with context.database(cfg).write() as s:
            grant_connect(s, name)
            agent = is_agent_role(s, name)
            if not agent:
                broker_accounts.put(s, name, password_hash(password))
    except RoleError as e:
        raise UserError(str(e)) from None
    click.echo(f"{name} may now use this deployment")
    if not agent:
        _broker_account(cfg, name, password, shown=True)


@user.command("revoke")
@click.argument("name")
def user_revoke(name: str) -> None:
    """Take this deployment away from NAME's role (it can no longer connect to its
    database) and remove their broker account; other deployments on the server keep
    the role."""
    from tpuq.queue import accounts, logstream
    from tpuq.state import broker_accounts
    from tpuq.state.roles import RoleError, revoke_connect

    cfg = context.settings()
    try:
        with context.database(cfg).write() as s:
            revoke_connect(s, name)
            broker_accounts.remove(s, name)
            wanted = broker_accounts.all_accounts(s)
    except RoleError as e:
        raise UserError(str(e)) from None
    click.echo(f"{name} can no longer use this deployment")
    if cfg.broker_url:
        try:
            accounts.sync(logstream.client(cfg.broker_url), wanted)
        except Exception:  # noqa: BLE001 - the agents remove it within a minute
            click.echo("their broker account goes within a minute (the agents remove it)")


COMMANDS = [whoami, admin, user]
