"""`tpuq db` across versions: code older than the database refuses in one line and says to
upgrade tpuq; `tpuq db downgrade REV` goes back only when nothing open is lost, and
drops records of ended work only when told to."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from tpuq.state.db import SCHEMA_HEAD

pytestmark = pytest.mark.embedded_only


def one_line(stack, *args: str, code: int, **env: str) -> str:  # type: ignore[no-untyped-def]
    r = stack.tpuq(*args, check=False, **env)
    assert r.returncode == code, (args, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    return r.stderr


def test_code_older_than_the_database_says_to_upgrade_tpuq_not_the_database(stack, host):
    stack.tpuq("status")
    with stack.db.write() as s:  # as a later release's `tpuq db upgrade` leaves it
        s.execute(text("UPDATE alembic_version SET version_num = '9999'"))
        s.execute(text("UPDATE meta SET value = '9999' WHERE key = 'min_code'"))
    for command in (("db", "upgrade"), ("db", "current"), ("status",), ("submit", "/bin/true"),
                    ("agent",)):
        line = one_line(stack, *command, code=1, **host.env())
        assert f"is at schema 9999, newer than this tpuq (schema {SCHEMA_HEAD}), and needs " \
               "tpuq of schema 9999 or later: upgrade tpuq here" in line, line
        assert "run `tpuq db upgrade`" not in line
    line = one_line(stack, "db", "downgrade", "0012", code=1)
    assert line.endswith(f"newer than this tpuq (schema {SCHEMA_HEAD}): downgrade it with the tpuq that "
                         "upgraded it\n")


def test_a_newer_database_that_admits_this_code_is_left_as_it_is(stack):
    stack.tpuq("status")
    with stack.db.write() as s:
        s.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    r = stack.tpuq("db", "upgrade")
    assert "at schema 9999, newer than this tpuq" in r.stdout and "nothing to do" in r.stdout
    assert "which it admits" in stack.tpuq("db", "current").stdout
    stack.tpuq("status")


def test_downgrade_keeps_open_work_and_drops_ended_records_only_when_told(stack, host):
    first = stack.submit("--array", "0-3%2", "--hold", "--", "/bin/true")
    agent = stack.start_agent(host)
    line = one_line(stack, "db", "downgrade", "0005", code=5)
    assert f"agents run on {host.name}: stop them first" in line
    agent.stop()
    line = one_line(stack, "db", "downgrade", "0005", code=5)
    assert (f"would lose 4 open array task(s) ({first}, {first + 1}, {first + 2}, "
            f"{first + 3}): their arrays' limits (%N) would not hold (migration 0006)") in line
    stack.tpuq("cancel", "--yes", "--array", str(first))
    line = one_line(stack, "db", "downgrade", "0005", code=5)
    assert "going down to 0005 drops " in line
    assert "the array ids of 4 ended task(s) (migration 0006)" in line
    assert "run again with --force" in line
    assert one_line(stack, "db", "downgrade", "0099", code=2).startswith(
        "tpuq: error: '0099' is not a schema older than the database's")
    r = stack.tpuq("db", "downgrade", "0005", "--force")
    assert f"{SCHEMA_HEAD} -> 0005" in r.stdout
    r = stack.tpuq("db", "current", check=False)
    assert r.returncode == 1 and f"at 0005, tpuq needs {SCHEMA_HEAD}" in r.stdout
    stack.tpuq("db", "upgrade")
    shown = stack.tpuq("show", str(first)).stdout
    assert "cancelled" in shown
