"""Who may do what: `tpuq whoami`, `tpuq admin add/remove`, `tpuq user add`."""

from __future__ import annotations

import sys

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
    """PostgreSQL login roles for the team deployment (run with the database owner's URL)."""


@user.command("add")
@click.argument("name")
@click.option("--agent", is_flag=True, help="A role for host agents (not restricted).")
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin.")
def user_add(name: str, agent: bool, password_stdin: bool) -> None:
    """Create NAME's login role: they may then use tpuq from any machine with their own
    database URL, and change only their own jobs (row-level security)."""
    from tpuq.state.roles import RoleError, create_login

    cfg = context.settings()
    password = sys.stdin.readline().rstrip("\n") if password_stdin else None
    try:
        with context.database(cfg).write() as s:
            password = create_login(s, name, agent=agent, password=password)
    except RoleError as e:
        raise UserError(str(e)) from None
    click.echo(f"role {name} created ({'agent' if agent else 'user'})")
    if not password_stdin:
        click.echo(f"password: {password}")


@user.command("grant")
@click.argument("name")
def user_grant(name: str) -> None:
    """Let NAME's existing role (made for another deployment on the same PostgreSQL
    server) use this deployment too. Roles belong to the server, databases do not share
    them unless told."""
    _change_access(name, grant=True)


@user.command("revoke")
@click.argument("name")
def user_revoke(name: str) -> None:
    """Take this deployment away from NAME's role (it can no longer connect to its
    database); other deployments on the server keep it."""
    _change_access(name, grant=False)


def _change_access(name: str, *, grant: bool) -> None:
    from tpuq.state.roles import RoleError, grant_connect, revoke_connect

    try:
        with context.database(context.settings()).write() as s:
            (grant_connect if grant else revoke_connect)(s, name)
    except RoleError as e:
        raise UserError(str(e)) from None
    click.echo(f"{name} {'may now use' if grant else 'can no longer use'} this deployment")


COMMANDS = [whoami, admin, user]
