"""psycopg's warnings of an error it ignored while cleaning up after the one it raised
(which tpuq says in its own line) are not shown: a Ctrl-C during a query (its failed
rollback), a pipeline whose connection was lost under it. Other warnings are kept."""

from __future__ import annotations

import logging

import pytest

import tpuq.state.pgconnect  # noqa: F401  (installs the filter; both ways to the database load it)


class Shown:
    """An object psycopg names with %r, as its own classes show themselves."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name} at 0x1>"


def test_secondary_errors_are_dropped_and_others_are_kept(
        caplog: pytest.LogCaptureFixture) -> None:
    psycopg = logging.getLogger("psycopg")
    with caplog.at_level(logging.WARNING, logger="psycopg"):
        psycopg.warning("error ignored in rollback of %s: %s", "<Transaction>",
                        "sending query failed: another command is already in progress")
        psycopg.warning("error ignored in rollback of %s: %s", "<Transaction>",
                        "server closed the connection unexpectedly")
        psycopg.warning("error ignored terminating %r: %s", Shown("psycopg.Pipeline [BAD]"),
                        "the connection is lost")
        psycopg.warning("error ignored terminating %r: %s", Shown("psycopg.Copy"),
                        "the connection is lost")
    assert [r.getMessage() for r in caplog.records] == [
        "error ignored in rollback of <Transaction>: server closed the connection unexpectedly",
        "error ignored terminating <psycopg.Copy at 0x1>: the connection is lost"]
