"""`tpuq web`: the dashboard and /metrics; `tpuq web token`: sign-in tokens (admins)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from tpuq.cli import context
from tpuq.cli.errors import UserError

if TYPE_CHECKING:
    from tpuq.state.db import Database


@click.group(invoke_without_command=True)
@click.option("--host", "listen", envvar="TPUQ_WEB_HOST",
              help="Address to listen on (default 127.0.0.1: this machine only).")
@click.option("--port", type=int, envvar="TPUQ_WEB_PORT", help="Port (default 8765).")
@click.pass_context
def web(ctx: click.Context, listen: str | None, port: int | None) -> None:
    """Serve the dashboard (and /metrics) until Ctrl-C.

    \b
      tpuq web                          http://127.0.0.1:8765 (sign in with a token)
      tpuq web --host 0.0.0.0           every address: put TLS in front of it
      tpuq web token add alice          a sign-in token for alice (admins)

    Everyone signs in (a token from `tpuq web token add`, or a PostgreSQL role's
    password in the team deployment) and sees and does what the CLI lets them.
    """
    if ctx.invoked_subcommand is not None:
        return
    from tpuq.web.app import serve

    cfg = context.settings()
    host, port = listen or cfg.web_host, cfg.web_port if port is None else port
    db = context.database(cfg)
    click.echo(f"tpuq web on http://{host}:{port} (Ctrl-C stops it)", err=True)
    serve(cfg, db, host, port)


@web.group()
def token() -> None:
    """Sign-in tokens for the dashboard (admins issue and revoke them)."""


@token.command("add")
@click.argument("user")
@click.option("--label", help="What the token is for (shown by `tpuq web token list`).")
@click.option("--days", type=float, help="It stops working after this many days.")
def token_add(user: str, label: str | None, days: float | None) -> None:
    """Issue a token that signs USER in; it is printed once (only a digest is kept)."""
    from tpuq.state import webtokens

    db, by = _as_admin("issue sign-in tokens")
    with db.write() as s:
        token_id, value = webtokens.issue(s, user, by, label=label,
                                          valid_s=None if days is None else days * 86400.0)
    click.echo(f"token {token_id} for {user} (give it to them; it is not shown again):")
    click.echo(value)


@token.command("list")
@context.json_option
def token_list(as_json: bool) -> None:
    """Every token: whose, made by whom, whether revoked or expired."""
    from tpuq.cli import render
    from tpuq.state import webtokens

    db, _ = _as_admin("list sign-in tokens")
    with db.read() as s:
        rows = [dict(r._mapping) for r in webtokens.listed(s)]
    if as_json:
        context.echo_json(rows)
        return
    click.echo(render.table(["ID", "USER", "LABEL", "MADE", "BY", "EXPIRES", "REVOKED"], [
        [r["id"], r["user"], r["label"] or "-", render.clock(r["created_at"]), r["created_by"],
         render.clock(r["expires_at"]), render.clock(r["revoked_at"])] for r in rows]))


@token.command("revoke")
@click.argument("token_id", type=int)
def token_revoke(token_id: int) -> None:
    """Revoke token TOKEN_ID: it signs nobody in, and its sessions end at once."""
    from tpuq.state import webtokens

    db, _ = _as_admin("revoke sign-in tokens")
    with db.write() as s:
        if not webtokens.revoke(s, token_id):
            raise UserError(f"no live token {token_id} (see `tpuq web token list`)")
    click.echo(f"token {token_id} revoked")


def _as_admin(what: str) -> tuple[Database, str]:
    """The database and who the caller is, once the database says they are an admin:
    the owner of an embedded database (or an agents' role) is; a login role must be in
    the admins table (as for every other admin request)."""
    from tpuq.state import admins

    cfg = context.settings()
    db = context.database(cfg)
    with db.read() as s:
        who = admins.session_user(s)
        if who is None or who.privileged:
            return db, cfg.user_name
        if not admins.is_admin(s, who.name):
            raise UserError(f"only admins may {what}; you are {who.name}")
        return db, who.name


COMMANDS = [web]
