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


@pytest.fixture
def without_pipeline_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """psycopg as it runs on a libpq without pipeline mode (older than 14): asking for a
    pipeline fails, as psycopg's own check does."""
    import psycopg

    def refused(*_a: object, **_k: object) -> None:
        raise psycopg.NotSupportedError("libpq too old for pipeline mode")

    monkeypatch.setattr(psycopg.Pipeline, "is_supported", classmethod(lambda cls: False))
    monkeypatch.setattr(psycopg.Connection, "pipeline", refused)
