"""A database that cannot be used says why, in one line, from every command: an outage
is not a missing schema, and a missing database is not an outage."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.services import create_pg_database, drop_pg_database, free_port
from tpuq.state.db import SCHEMA_HEAD

PG = "postgresql+psycopg://{user}@127.0.0.1:{port}/{db}"


def one_line(stack, *args: str, url: str, code: int = 1) -> str:  # type: ignore[no-untyped-def]
    r = stack.tpuq(*args, check=False, TPUQ_DATABASE_URL=url)
    assert r.returncode == code, (args, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith("tpuq: error: "), r.stderr
    return r.stderr


@pytest.mark.parametrize("url, meaning", [
    (PG.format(user="postgres", port=free_port(), db="tpuq"), "connection refused"),
    (PG.format(user="postgres", port=5432, db="tpuq_no_such_database"), "no such database"),
    (PG.format(user="tpuq_no_such_role", port=5432, db="postgres"), "no such user"),
], ids=["refused", "no-database", "no-user"])  # ids without the free port: stable across workers
@pytest.mark.parametrize("command", [("status",), ("db", "current"), ("db", "upgrade"),
                                     ("submit", "--", "/bin/true"), ("quota",)])
def test_each_kind_of_unreachable_database_is_its_own_line(stack, command, url, meaning):
    line = one_line(stack, *command, url=url)
    assert meaning in line
    assert "db upgrade" not in line, "an outage must not send anyone to run migrations"


@pytest.fixture
def empty_pg() -> Iterator[str]:
    url = create_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)


def test_a_reachable_database_without_the_schema_says_to_upgrade(stack, empty_pg):
    pg_url = empty_pg
    line = one_line(stack, "status", url=pg_url)
    assert line.endswith("has no tpuq schema: run `tpuq db upgrade` (once, for the "
                         "deployment)\n")
    assert "run `tpuq db upgrade`" in one_line(stack, "db", "current", url=pg_url)
    r = stack.tpuq("db", "upgrade", TPUQ_DATABASE_URL=pg_url)
    assert r.returncode == 0
    r = stack.tpuq("db", "current", TPUQ_DATABASE_URL=pg_url)
    assert r.returncode == 0 and f"at {SCHEMA_HEAD}, tpuq needs {SCHEMA_HEAD}" in r.stdout


def test_the_agent_says_why_it_cannot_start(stack, host):
    url = PG.format(user="postgres", port=5432, db="tpuq_no_such_database")
    r = stack.tpuq("agent", check=False, TPUQ_DATABASE_URL=url, **host.env())
    assert r.returncode == 1, r.stderr
    assert "no such database" in r.stderr and "Traceback" not in r.stderr
