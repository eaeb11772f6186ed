"""Databases for state tests: SQLite in a temp dir and a real PostgreSQL database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tpuq.state.db import Database


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
