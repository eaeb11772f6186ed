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
