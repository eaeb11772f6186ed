"""Alembic: one head, upgrades an empty database, and agrees with the models."""

from __future__ import annotations

import subprocess
import sys

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from tpuq.state.db import SCHEMA_HEAD, Database
from tpuq.state.migrate import heads
from tpuq.state.models import Base


def test_single_alembic_head_matching_the_code():
    assert heads() == [SCHEMA_HEAD]


def test_upgrade_on_empty_database_reaches_head_and_matches_models(db):
    assert db.schema_version() == SCHEMA_HEAD
    with db.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(ctx, Base.metadata)
    assert diff == [], f"models and migrations disagree: {diff}"


def test_upgrade_is_idempotent(db):
    db.upgrade()
    assert db.schema_version() == SCHEMA_HEAD


def test_agent_refuses_database_not_at_head_and_names_the_command(pg_url, tmp_path, host):
    env = {"TPUQ_DATABASE_URL": pg_url, "TPUQ_HOME": str(tmp_path / "h"), **host.env(),
           "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", "from tpuq.cli.main import main; main()", "agent"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "has no tpuq schema: run `tpuq db upgrade`" in r.stderr
    assert "Traceback" not in r.stderr
    up = subprocess.run([sys.executable, "-c", "from tpuq.cli.main import main; main()", "db",
                         "upgrade"], env=env, capture_output=True, text=True, timeout=60)
    assert up.returncode == 0 and SCHEMA_HEAD in up.stdout
    assert Database(pg_url).schema_version() == SCHEMA_HEAD


@pytest.mark.embedded_only
def test_embedded_default_creates_its_database_on_first_use(stack):
    stack.tpuq("status")
    assert Database(f"sqlite:///{stack.home}/tpuq.db").schema_version() == SCHEMA_HEAD


def test_the_queue_tables_are_analyzed_after_a_thousand_changes_whatever_their_size(pg_url):
    """PostgreSQL plans a pass's reads from its statistics; by default it refreshes them
    after a tenth of a table changed, so a long history with a sudden deep queue kept
    statistics that said few jobs were queued (and a plan that probed the dependency
    links from each queued job)."""
    from sqlalchemy import text

    d = Database(pg_url)
    d.upgrade()
    try:
        with d.read() as s:
            options = dict(s.execute(text(
                "SELECT relname, reloptions FROM pg_class WHERE relname IN ('jobs', 'job_deps') "
                "AND relnamespace = current_schema()::regnamespace")).all())
    finally:
        d.dispose()
    for table in ("jobs", "job_deps"):
        assert set(options[table] or ()) >= {"autovacuum_analyze_scale_factor=0",
                                             "autovacuum_analyze_threshold=1000"}, table
