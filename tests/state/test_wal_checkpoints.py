"""The embedded database's write-ahead log: the agent copies it into the database on a
ticker of its own, so no commit (no job's start) waits for that copy and its fsync."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tpuq.state.db import Database

ROWS = 1500  # over 1,000 pages of log (SQLite's default wal_autocheckpoint): 4 KiB each


def _write(db: Database, rows: int) -> None:
    blob = os.urandom(3000)  # a page each, more or less
    for _ in range(rows // 100):
        with db.write() as s:
            raw = s.connection().connection.driver_connection
            assert raw is not None
            raw.executemany("INSERT INTO t (b) VALUES (?)", [(blob,)] * 100)


def _database(path: Path) -> Database:
    db = Database(f"sqlite:///{path}")
    with db.write() as s:
        s.connection().exec_driver_sql("CREATE TABLE t (b BLOB)")
    return db


@pytest.mark.parametrize("background", [False, True])
def test_commits_copy_the_log_themselves_unless_the_process_checkpoints_in_background(
        tmp_path: Path, background: bool) -> None:
    path = tmp_path / "tpuq.db"
    db = _database(path)
    try:
        if background:
            assert db.checkpoint_in_background() is True
        before = path.stat().st_size
        _write(db, ROWS)
        wal = Path(f"{path}-wal").stat().st_size
        assert wal > 1000 * 4096, "the log went past the automatic checkpoint's size"
        if not background:
            assert path.stat().st_size > before + 1000 * 4096, "a commit copied the log"
            return
        assert path.stat().st_size == before, "no commit copied the log"
        db.checkpoint()
        assert path.stat().st_size > before + ROWS * 3000, "the checkpoint copied it all"
    finally:
        db.dispose()


def test_postgresql_has_no_log_of_ours_to_copy(pg_url: str) -> None:
    db = Database(pg_url)
    try:
        assert db.checkpoint_in_background() is False
    finally:
        db.dispose()
