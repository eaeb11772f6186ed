"""Databases for state tests: SQLite in a temp dir and a real PostgreSQL database."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text

from tpuq.state.db import Database

PG_ADMIN = os.environ.get("TPUQ_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database, dropped afterwards."""
    name = f"tpuq_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"PostgreSQL is required at {PG_ADMIN} (.ci/run starts it): {e}")
    try:
        yield PG_ADMIN.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path) -> Iterator[Database]:
    url = (f"sqlite:///{tmp_path}/t.db" if request.param == "sqlite"
           else request.getfixturevalue("pg_url"))
    d = Database(url)
    d.upgrade()
    try:
        yield d
    finally:
        d.dispose()
