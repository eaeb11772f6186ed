"""Users' broker accounts in the database: the truth every agent makes Redis agree with
(queue/accounts.py). A name and its password's SHA-256, never the password."""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from tpuq.state.clock import db_now
from tpuq.state.db import rows_changed
from tpuq.state.models import BrokerAccount


def put(s: Session, name: str, password_sha256: str) -> None:
    """Make (or give a new password to) `name`'s account."""
    row = s.get(BrokerAccount, name)
    if row is None:
        s.add(BrokerAccount(name=name, password_sha256=password_sha256, created_at=db_now()))
    else:
        row.password_sha256 = password_sha256


def remove(s: Session, name: str) -> bool:
    return bool(rows_changed(s.execute(delete(BrokerAccount).where(BrokerAccount.name == name))))


def all_accounts(s: Session) -> dict[str, str]:
    """Every account: name -> password hash."""
    return {name: sha for name, sha in s.execute(
        select(BrokerAccount.name, BrokerAccount.password_sha256))}
