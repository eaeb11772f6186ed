"""PostgreSQL login roles for users and agents (team deployment).

A user off the hosts (a laptop, a login VM) reaches the database as a login role of
their own: row-level security (migrations/versions/0003) lets it read the queue, insert
jobs only as itself and change only its own jobs; the job's owner is the session's
`current_user`. Agents log in as members of `tpuq_agent`, which the policies let do
everything.

Roles belong to the whole PostgreSQL server, not to one database, so a deployment's
database is closed to `PUBLIC` (migration 0012) and each role made for it is given
`CONNECT` on it alone: a role made for one deployment cannot connect to another on the
same server until that deployment's owner lets it (`grant_connect`).
"""

from __future__ import annotations

import re
import secrets

from sqlalchemy import text
from sqlalchemy.orm import Session

from tpuq.errors import TpuqError

USER_GROUP = "tpuq_user"
AGENT_GROUP = "tpuq_agent"
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}\Z")


class RoleError(TpuqError, ValueError):
    """A role that cannot be made; the message is shown as is."""


def create_login(s: Session, name: str, *, agent: bool = False,
                 password: str | None = None) -> str:
    """Create login role `name` in the users' (or agents') group; its password."""
    if s.get_bind().dialect.name != "postgresql":
        raise RoleError("login roles are for the team deployment (PostgreSQL); an embedded "
                        "database has one owner: whoever may write its file")
    if not _NAME.match(name):
        raise RoleError(f"role name {name!r}: lowercase letters, digits and '_' "
                        "(a Unix login name usually is one)")
    exists = s.scalar(text("SELECT 1 FROM pg_roles WHERE rolname = :n"), {"n": name})
    if exists:
        raise RoleError(f"role {name} exists already (on this server; `tpuq user grant "
                        f"{name}` lets it use this deployment too)")
    password = password or secrets.token_urlsafe(18)
    group = AGENT_GROUP if agent else USER_GROUP
    quoted = _quote(s, name)
    # CREATE ROLE takes no bound parameters: the password is a quoted literal
    literal = "'" + password.replace("'", "''") + "'"
    s.execute(text(f"CREATE ROLE {quoted} LOGIN PASSWORD {literal} IN ROLE {group}"))
    s.execute(text(f"GRANT CONNECT ON DATABASE {_database(s)} TO {quoted}"))
    return password


def grant_connect(s: Session, name: str) -> None:
    """Let an existing tpuq role (made for another deployment on this server) use this one."""
    group = s.scalar(text(
        "SELECT g.rolname FROM pg_roles r JOIN pg_auth_members m ON m.member = r.oid "
        "JOIN pg_roles g ON g.oid = m.roleid WHERE r.rolname = :n "
        "AND g.rolname IN (:u, :a) ORDER BY g.rolname DESC LIMIT 1"),
        {"n": name, "u": USER_GROUP, "a": AGENT_GROUP})
    if group is None:
        raise RoleError(f"{name} is not a tpuq role on this server (`tpuq user add {name}`)")
    s.execute(text(f"GRANT CONNECT ON DATABASE {_database(s)} TO {_quote(s, name)}"))


def is_agent_role(s: Session, name: str) -> bool:
    """Is `name` a member of the agents' group?"""
    return bool(s.scalar(text(
        "SELECT 1 FROM pg_roles r JOIN pg_auth_members m ON m.member = r.oid "
        "JOIN pg_roles g ON g.oid = m.roleid WHERE r.rolname = :n AND g.rolname = :a"),
        {"n": name, "a": AGENT_GROUP}))


def revoke_connect(s: Session, name: str) -> None:
    """Take this deployment away from a role; its other deployments keep it."""
    if not s.scalar(text("SELECT 1 FROM pg_roles WHERE rolname = :n"), {"n": name}):
        raise RoleError(f"no role {name} on this server")
    s.execute(text(f"REVOKE CONNECT ON DATABASE {_database(s)} FROM {_quote(s, name)}"))


def drop_login(s: Session, name: str) -> None:
    quoted = _quote(s, name)
    if s.scalar(text("SELECT 1 FROM pg_roles WHERE rolname = :n"), {"n": name}):
        s.execute(text(f"REVOKE ALL ON DATABASE {_database(s)} FROM {quoted}"))
    s.execute(text(f"DROP ROLE IF EXISTS {quoted}"))


def _quote(s: Session, name: str) -> str:
    return s.get_bind().dialect.identifier_preparer.quote(name)


def _database(s: Session) -> str:
    return _quote(s, s.scalar(text("SELECT current_database()")))
