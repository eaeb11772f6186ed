"""How tpuq connects to PostgreSQL: the same options through SQLAlchemy's engines
(state/db.py) and through psycopg alone (state/pgsubmit.py). Nothing here loads either.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext

TYPE_CHECKING = False  # typing costs an import; the type checker reads this as True
if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from typing import Any


class _SecondaryErrors(logging.Filter):
    """Drops psycopg's warnings of an error it ignored while cleaning up after the one it
    raised, which tpuq says in its own one line:

    - "error ignored in rollback ...: another command is already in progress": a Ctrl-C
      that lands while a query runs leaves the connection mid-command, so the rollback on
      the way out cannot be sent (the server rolls back when the connection closes);
    - "error ignored terminating <psycopg.Pipeline ...>": a pipeline whose connection
      was lost under it (the error raised says so).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        said = record.getMessage()
        return not (("error ignored in rollback" in said
                     and "another command is already in progress" in said)
                    or said.startswith("error ignored terminating <psycopg.Pipeline"))


logging.getLogger("psycopg").addFilter(_SecondaryErrors())

# A network partition must not freeze the deployment. The server ends a session left
# idle inside a transaction (its client cut off mid-transaction) so its row locks (the
# leader row, a job's row) cannot block the other agents for longer than that; no tpuq
# transaction waits between statements on anything but its own short computation (a
# scheduling pass over 100,000 queued jobs plans in well under a second: bench/). On the
# client side a dead server is noticed by TCP: unacknowledged data for 10 s, or 3 missed
# keepalives after 5 s of silence, drops the connection, and a connect gives up after 5 s.
PG_CONNECT_ARGS: dict[str, Any] = {
    "connect_timeout": 5,
    "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
    "options": "-c idle_in_transaction_session_timeout=10000",
}

# the channel of the agents' wake-ups (state/wakeups.py)
WAKE_CHANNEL = "tpuq_wake"

# the URL schemes SQLAlchemy reads as PostgreSQL through psycopg (state/db.py rewrites the
# plain one), whose rest libpq reads as SQLAlchemy does: user, %-escaped password, host,
# port, database, and libpq's own keywords as the query
_SCHEMES = ("postgresql+psycopg://", "postgresql://")


def conninfo(url: str) -> str | None:
    """The libpq connection URI for a TPUQ_DATABASE_URL, or None for one that only
    SQLAlchemy reads (another driver, SQLite)."""
    for scheme in _SCHEMES:
        if url.startswith(scheme):
            return "postgresql://" + url[len(scheme):]
    return None


def pipeline(conn: Any) -> AbstractContextManager[Any]:
    """Statements sent inside go together, one round trip, where the libpq psycopg runs
    on has pipeline mode (libpq 14 or later: psycopg[binary] bundles one); with an older
    libpq, one after another, the same results."""
    import psycopg

    return conn.pipeline() if psycopg.Pipeline.is_supported() else nullcontext()
