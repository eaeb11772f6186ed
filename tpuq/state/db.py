"""Engines, sessions and the schema gate.

SQLite (embedded) runs in WAL mode so readers never wait for the agent, and every write
transaction starts with BEGIN IMMEDIATE so two writers queue on the lock instead of
failing halfway with "database is locked". PostgreSQL (team) uses plain transactions.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from sqlalchemy import Engine, Result, create_engine, event, exc
from sqlalchemy.engine import CursorResult
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.orm import Session

from tpuq.errors import Failure, TpuqError
from tpuq.state import versions
from tpuq.state.pgconnect import PG_CONNECT_ARGS
from tpuq.state.versions import SCHEMA_HEAD as SCHEMA_HEAD  # where callers name it
from tpuq.state.versions import Schema


def rows_changed(result: Result[Any]) -> int:
    """How many rows an UPDATE or DELETE changed."""
    return cast("CursorResult[Any]", result).rowcount


class SchemaError(TpuqError, RuntimeError):
    """The database is missing or not at the schema this tpuq expects."""

    KIND = Failure.UNAVAILABLE


def _sqlite_engine(url: str, immediate: bool, options: dict[str, bool]) -> Engine:
    import sqlite3  # the embedded deployment's alone

    path = url.split("sqlite:///", 1)[1]
    if path and path != ":memory:":
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        # made by whoever opens it first, for its owner alone: it holds every job's
        # captured environment (SQLite makes its -wal and -shm files with the same mode)
        os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
    engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _rec: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves, below
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: safe against process crashes
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        if not options["autocheckpoint"]:  # Database.checkpoint_in_background
            cur.execute("PRAGMA wal_autocheckpoint=0")
        cur.close()

    begin = "BEGIN IMMEDIATE" if immediate else "BEGIN"

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # on the driver's connection itself: exec_driver_sql's machinery cost a quarter of
        # a short transaction's own (20 of 80 us); an error is raised as SQLAlchemy's
        # would be, so an outage is told the same way (state/outage.py)
        try:
            conn.connection.driver_connection.execute(begin)
        except sqlite3.Error as e:
            raise exc.DBAPIError.instance(begin, (), e, sqlite3.Error,
                                          dialect=conn.dialect) from e

    return engine


class Database:
    """Owns the engines; hands out short transactions."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        self._options = {"autocheckpoint": True}
        if self.is_sqlite:
            self.engine = _sqlite_engine(url, immediate=True, options=self._options)
            self._read_engine = _sqlite_engine(url, immediate=False, options=self._options)
        else:
            url = url.replace("postgresql://", "postgresql+psycopg://", 1)
            # no pool_pre_ping: it costs a round trip per transaction (several per job). After
            # a server restart the first use of a pooled connection fails, the pool drops
            # them all, and the caller retries (state/outage.py, the agent's tickers).
            # last in, first out: the few connections in use at a time are the same
            # ones, whose server sessions already prepared tpuq's statements (psycopg
            # prepares one after its fifth run on a connection) and compiled the
            # triggers' functions; round-robin over the pool paid that on each of them
            self.engine = create_engine(url, pool_size=10, max_overflow=20, pool_use_lifo=True,
                                        connect_args=PG_CONNECT_ARGS)
            self._read_engine = self.engine

    @contextmanager
    def write(self) -> Iterator[Session]:
        """One write transaction: committed on success, rolled back on any error."""
        with Session(self.engine, expire_on_commit=False) as s, s.begin():
            yield s

    @contextmanager
    def single(self) -> Iterator[Session]:
        """A write that is one statement on PostgreSQL, run without BEGIN and COMMIT
        (autocommit: two round trips fewer; the statement is atomic by itself). Only for
        state functions that say they issue one statement there. On SQLite, where they
        issue several, a normal write transaction."""
        if self.is_sqlite:
            with self.write() as s:
                yield s
            return
        with self.engine.connect() as c:
            with Session(c.execution_options(isolation_level="AUTOCOMMIT"),
                         expire_on_commit=False) as s:
                yield s

    @contextmanager
    def read(self) -> Iterator[Session]:
        with Session(self._read_engine, expire_on_commit=False) as s, s.begin():
            yield s

    def checkpoint_in_background(self) -> bool:
        """SQLite: from now on this process's commits leave the write-ahead log to
        `checkpoint()` (the agent's ticker) instead of copying it into the database
        themselves, with an fsync, whenever it passed 1,000 pages: that commit's job
        start waited for it. False on PostgreSQL, which has nothing of the kind."""
        if not self.is_sqlite:
            return False
        self._options["autocheckpoint"] = False
        self.engine.dispose()  # connections opened before take the setting as they open again
        self._read_engine.dispose()
        return True

    def checkpoint(self) -> None:
        """Copy what the write-ahead log holds into the database, waiting for no reader or
        writer (PASSIVE: what cannot be copied now is copied next time)."""
        with self.engine.connect() as c:
            driver = c.connection.driver_connection  # outside a transaction, as it must be
            assert driver is not None
            driver.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def schema_version(self) -> str | None:
        """The schema revision; None for a reachable database without tpuq's schema.
        A database that cannot be reached raises SchemaError saying why (outage.py)."""
        return self.schema().revision

    def schema(self) -> Schema:
        """Where the database is (revision, oldest code admitted). A database that
        cannot be reached raises SchemaError saying why (outage.py)."""
        from tpuq.state.outage import describe

        try:
            c = self._read_engine.connect()
        except (OperationalError, ProgrammingError) as e:
            raise SchemaError(describe(e, self.safe_url)) from None
        with c:
            for read in (versions.read, versions.read_revision):
                try:
                    return read(c)
                except (OperationalError, ProgrammingError):
                    c.rollback()
            return versions.Schema(None)

    def upgrade(self) -> None:
        from tpuq.state.migrate import upgrade

        self.refuse_if_too_new()
        upgrade(self.engine)

    def refuse_if_too_new(self, schema: Schema | None = None) -> Schema:
        """Raise SchemaError when the database is newer than this code and does not
        admit it; else its schema."""
        schema = schema or self.schema()
        why = schema.too_new_for(SCHEMA_HEAD, self.safe_url)
        if why:
            raise SchemaError(why)
        return schema

    def ensure_schema(self, auto_upgrade: bool) -> None:
        """Embedded databases upgrade themselves; team databases must be upgraded on
        purpose. A database newer than this code is used if it admits it, else refused."""
        schema = self.refuse_if_too_new()
        if schema.revision == SCHEMA_HEAD or schema.newer_than(SCHEMA_HEAD):
            return
        if auto_upgrade:
            self.upgrade()
            return
        if schema.revision is None:
            raise SchemaError(f"database {self.safe_url} has no tpuq schema: "
                              "run `tpuq db upgrade` (once, for the deployment)")
        raise SchemaError(f"database {self.safe_url} is at schema {schema.revision}, older "
                          f"than this tpuq (schema {SCHEMA_HEAD}): run `tpuq db upgrade`")

    @property
    def safe_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def dispose(self) -> None:
        self.engine.dispose()
        if self._read_engine is not self.engine:
            self._read_engine.dispose()


def open_database(settings: Any, auto_upgrade: bool | None = None) -> Database:
    """The database the settings point at, with its schema checked (and, embedded, upgraded)."""
    db = Database(settings.db_url)
    db.ensure_schema(auto_upgrade=db.is_sqlite if auto_upgrade is None else auto_upgrade)
    return db
