"""An embedded database under any directory a user may have: a TPUQ_HOME with a
non-ASCII name or a % in it (its URL is %-encoded; the migrations' configuration
reads % as the start of an interpolation)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from tpuq.settings import Settings
from tpuq.state.db import SCHEMA_HEAD, open_database


@pytest.mark.parametrize("name", ["zoë", "100%", "a%%b", "%(here)s"])
def test_the_embedded_database_makes_itself_under_any_home(tmp_path: Path, name: str) -> None:
    home = tmp_path / name
    db = open_database(Settings(home=str(home)), auto_upgrade=True)
    try:
        with db.engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() \
                == SCHEMA_HEAD
        assert (home / "tpuq.db").exists()
    finally:
        db.dispose()


def test_a_write_the_embedded_database_cannot_begin_is_an_outage(tmp_path: Path) -> None:
    """BEGIN IMMEDIATE goes to SQLite's own connection, not through SQLAlchemy's
    execution: a lock it cannot get is still raised as SQLAlchemy raises it, so the
    agent waits out an outage rather than failing the job."""
    import sqlite3

    from sqlalchemy import exc

    from tpuq.state.outage import is_outage

    db = open_database(Settings(home=str(tmp_path)), auto_upgrade=True)
    other = sqlite3.connect(tmp_path / "tpuq.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # holds the write lock
        with db.engine.connect() as conn:  # the pool's connection: give up at once
            conn.connection.driver_connection.execute("PRAGMA busy_timeout=0")
        with pytest.raises(exc.OperationalError, match="locked") as raised, db.write() as s:
            s.execute(text("SELECT 1"))
        assert is_outage(raised.value)
        other.execute("ROLLBACK")
        with db.write() as s:  # and the next write begins as ever
            assert s.execute(text("SELECT 1")).scalar() == 1
    finally:
        other.close()
        db.dispose()
