"""A Ctrl-C during a query: psycopg's failed rollback on the way out is not shown."""

from __future__ import annotations

import logging

import pytest

import tpuq.state.db  # noqa: F401  (installs the filter)


def test_an_interrupted_querys_rollback_warning_is_dropped_and_others_are_kept(
        caplog: pytest.LogCaptureFixture) -> None:
    psycopg = logging.getLogger("psycopg")
    with caplog.at_level(logging.WARNING, logger="psycopg"):
        psycopg.warning("error ignored in rollback of %s: %s", "<Transaction>",
                        "sending query failed: another command is already in progress")
        psycopg.warning("error ignored in rollback of %s: %s", "<Transaction>",
                        "server closed the connection unexpectedly")
    assert [r.getMessage() for r in caplog.records] == [
        "error ignored in rollback of <Transaction>: server closed the connection unexpectedly"]
