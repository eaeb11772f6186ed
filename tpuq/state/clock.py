"""The database clock, as float epoch seconds.

Leases compare against the database's clock, never a worker's, so a host whose clock
drifts cannot keep a lease alive or expire someone else's.
"""

from __future__ import annotations

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
