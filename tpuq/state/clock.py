"""The database clock, as float epoch seconds.

Leases compare against the database's clock, never a worker's, so a host whose clock
drifts cannot keep a lease alive or expire someone else's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Double
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement


class db_now(FunctionElement[float]):  # noqa: N801 - reads like SQL's now()
    type = Double()
    inherit_cache = True
    name = "db_now"


@compiles(db_now, "sqlite")
def _sqlite_now(element: db_now, compiler: Any, **kw: Any) -> str:
    # julianday('now') has millisecond precision and is stable within one statement
    return "((julianday('now') - 2440587.5) * 86400.0)"


@compiles(db_now, "postgresql")
def _pg_now(element: db_now, compiler: Any, **kw: Any) -> str:
    return "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"


@dataclass(frozen=True)
class FromNow:
    """A column value of "the database clock plus `seconds`", for state changes whose
    statements are built once and reused (transitions.py): the seconds are a bound
    parameter, where `db_now() + seconds` would be a new statement every time."""

    seconds: float = 0.0


def from_now(seconds: float = 0.0) -> FromNow:
    return FromNow(float(seconds))
