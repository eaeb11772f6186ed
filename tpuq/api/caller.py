"""Who asks, and what they may do.

The caller's name comes from the kernel (SO_PEERCRED on the agent's socket), from the
database session (a PostgreSQL login role, `current_user`) or from owning the embedded
database itself, never from the caller's environment. Admins are named by the
deployment (the `admins` table); root and the agent's own user are admins on their host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpuq.errors import TpuqError
from tpuq.protocol import Failure


@dataclass(frozen=True)
class Caller:
    """`name`: whom the caller acts as (root and the agent's user may act for another
    user: TPUQ_USER); `account`: who the kernel or the database says the caller's process
    is, whatever name it acts under (empty: the same as `name`)."""

    name: str
    admin: bool = False
    account: str = ""

    @property
    def own_name(self) -> str:
        """The caller's own account name (never an assumed one)."""
        return self.account or self.name

    def owns(self, owner: str) -> bool:
        """May the caller change (and read the secrets and output of) `owner`'s job?"""
        return self.admin or owner == self.name


class Denied(TpuqError):
    """A request that is not carried out: `kind` says how the client should react."""

    def __init__(self, kind: Failure, message: str) -> None:
        super().__init__(message, kind)
        self.message = message


def forbidden(message: str) -> Denied:
    return Denied(Failure.FORBIDDEN, message)


def not_found(message: str) -> Denied:
    return Denied(Failure.NOT_FOUND, message)


def owned_job(s: Any, caller: Caller, job_id: int, what: str) -> Any:
    """The job's row (queries.JOB_COLUMNS) when the caller may read `what` of it (its
    output, its result): its owner or an admin; else not found, or forbidden."""
    from tpuq.state import queries

    row = queries.job(s, job_id)
    if row is None:
        raise not_found(f"job {job_id} does not exist")
    if not caller.owns(row.owner):
        raise forbidden(f"job {job_id}'s {what} is {row.owner}'s; only its owner or an "
                        "admin may read it")
    return row


def require_admin(caller: Caller, what: str) -> None:
    if not caller.admin:
        raise forbidden(f"only admins may {what}; you are {caller.name} "
                        "(admins: `tpuq admin add USER`)")
