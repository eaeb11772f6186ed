"""Statements run straight on the DBAPI cursor of a session's transaction.

For the few statements that run several times per job (a state change, a pass's reads):
through `Session.execute` each paid more in SQLAlchemy's per-call machinery (coercing
the statement, keying the compiled cache, building parameters and the result) than
SQLite took to run it. Here a statement is compiled once per dialect, with what its
types do to values and rows worked out then; a call binds the values in order, runs
the SQL on the session's own connection (so inside its transaction, BEGIN and
autocommit included) and returns plain named tuples.

Rules: only statements built once and kept (keyed by identity: `rows(s, stmt, ...)`
with a statement built per call would compile it per call); no expanding IN lists or
values rendered at execution (refused when compiled). A database error is raised as
SQLAlchemy raises it (`sqlalchemy.exc.DBAPIError` and its kinds), and a lost connection
is invalidated as SQLAlchemy would, so callers tell an outage the same way; the engine's
`before_cursor_execute` listeners hear every statement (with no execution context).
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from functools import partial
from typing import Any, cast

from sqlalchemy import exc
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import BindParameter

from tpuq.state.pgconnect import pipeline

_NOTHING = object()  # a parameter's own value when a call must give it
_UNREAD = object()  # result conversions not yet known


class _Compiled:
    __slots__ = ("sql", "positional", "names", "binds", "row", "types", "results")

    def __init__(self, sql: str, positional: bool,
                 binds: tuple[tuple[str, Callable[[Any], Any] | None, Any], ...],
                 row: Callable[[tuple[Any, ...]], Any], types: tuple[Any, ...]) -> None:
        self.sql, self.positional, self.binds, self.row = sql, positional, binds, row
        self.names = tuple(name for name, _, _ in binds)  # a named paramstyle's keys
        self.types = types  # each column's type as this dialect has it (none: no rows)
        # what converts each column's values, worked out from the first result's
        # description (a driver's type codes decide it); None: no column to convert
        self.results: Any = _UNREAD
# (dialect class, id of the statement, row type) -> its compiled form; the statement is
# kept in the value, so its id cannot be reused by another while it is here (the
# class, not the instance: every engine of a dialect compiles a statement alike)
_COMPILED: dict[tuple[type, int, type | None], tuple[Any, _Compiled]] = {}


def rows(s: Session, stmt: Any, params: Mapping[str, Any] | None = None, *,
         row: type[tuple[Any, ...]] | None = None) -> list[Any]:
    """Every row of `stmt` run with `params`, as named tuples (attributes: the columns'
    keys, as a SQLAlchemy Row has them), or of the `row` type given (a NamedTuple whose
    fields are the statement's columns, in order; `tuple`: plain tuples, as the driver
    returns them where no column's values need converting)."""
    return rows_of_each(s, [(stmt, params, row)])[0]


Call = tuple[Any, "Mapping[str, Any] | None", "type[tuple[Any, ...]] | None"]


def rows_of_each(s: Session, calls: Sequence[Call]) -> list[list[Any]]:
    """`rows` of each (statement, params, row type) in turn, in one transaction; on
    PostgreSQL sent together in one pipeline: one round trip for all of them instead of
    one each (the server still runs them in this order, each seeing what the ones before
    it saw or wrote)."""
    conn = s.connection()
    dialect = conn.dialect
    ready = [(c, _arguments(c, params)) for c, params in
             ((_compiled(stmt, dialect, row), params) for stmt, params, row in calls)]
    raw = conn.connection
    heard = conn.dispatch.before_cursor_execute
    cursors = [raw.cursor() for _ in ready]
    driver: Any = raw.driver_connection
    at = 0  # the statement an error is told with (a pipeline's: the last one sent)
    try:
        together = len(ready) > 1 and dialect.name == "postgresql"
        with pipeline(driver) if together else nullcontext():
            for i, ((c, args), cursor) in enumerate(zip(ready, cursors, strict=True)):
                at = i
                if heard:  # listeners (statement counts, logging) hear it as from Session.execute
                    heard(conn, cursor, c.sql, args, None, False)
                cursor.execute(c.sql, args)
        out = []
        for i, ((c, _), cursor) in enumerate(zip(ready, cursors, strict=True)):
            at = i
            fetched = cast("list[Any]", cursor.fetchall()) if c.types else []
            if c.results is _UNREAD and c.types:  # psycopg builds a description per call: once
                found = tuple(t.result_processor(dialect, d[1])
                              for t, d in zip(c.types, cursor.description, strict=True))
                c.results = found if any(found) else None
            out.append(_converted(c, fetched))
        return out
    except dialect.loaded_dbapi.Error as e:
        c, args = ready[at]
        gone = dialect.is_disconnect(e, raw, cursors[at])
        if gone:
            conn.invalidate(e)
        raise exc.DBAPIError.instance(c.sql, args, e, dialect.loaded_dbapi.Error,
                                      connection_invalidated=gone, dialect=dialect) from e
    finally:
        for cursor in cursors:
            cursor.close()


def _arguments(c: _Compiled, params: Mapping[str, Any] | None) -> Any:
    given = params or {}
    values = []
    for name, process, own in c.binds:
        v = given.get(name, own)
        if v is _NOTHING:
            raise exc.ArgumentError(f"a value is required for bind parameter {name!r}")
        # None too, as SQLAlchemy does: a JSON column's None is JSON null, not SQL NULL
        values.append(process(v) if process is not None else v)
    return values if c.positional else dict(zip(c.names, values, strict=True))


def _converted(c: _Compiled, fetched: list[Any]) -> list[Any]:
    procs = c.results
    if procs is None or procs is _UNREAD:  # nothing to convert (or no rows)
        return fetched if c.row is tuple else list(map(c.row, fetched))
    return [c.row(tuple(v if p is None or v is None else p(v)
                        for p, v in zip(procs, r, strict=True))) for r in fetched]


def first(s: Session, stmt: Any, params: Mapping[str, Any] | None = None) -> Any:
    """The first row of `stmt` run with `params`, or None (a statement that returns no
    rows: None)."""
    found = rows(s, stmt, params)
    return found[0] if found else None


def _compiled(stmt: Any, dialect: Any, row: type[tuple[Any, ...]] | None) -> _Compiled:
    key = (type(dialect), id(stmt), row)
    hit = _COMPILED.get(key)
    if hit is not None:
        return hit[1]
    compiled = stmt.compile(dialect=dialect)
    if compiled.literal_execute_params or compiled.post_compile_params or \
            getattr(compiled, "escaped_bind_names", None):
        raise NotImplementedError("direct.rows: a statement with values rendered at "
                                  "execution or renamed parameters; use Session.execute")
    positional = bool(compiled.positional)
    names = list(compiled.positiontup or ()) if positional else list(compiled.binds)
    binds = tuple((name, *_bind(compiled.binds[name], dialect)) for name in names)
    columns = list(stmt.exported_columns)
    keys = [col.key for col in columns]
    if row is not None and row is not tuple and list(getattr(row, "_fields", ())) != keys:
        raise TypeError(f"direct.rows: {row.__name__} is not the statement's columns {keys}")
    row_type = row or namedtuple("Row", keys, rename=True)
    # tuple.__new__, not _make: _make is Python code, and its length check is the
    # statement's own (it selects the row's fields); plain tuples are the driver's own
    made = _Compiled(str(compiled), positional, binds,
                     tuple if row is tuple else partial(tuple.__new__, row_type),
                     tuple(col.type.dialect_impl(dialect) for col in columns))
    _COMPILED[key] = (stmt, made)
    return made


def _bind(bind: BindParameter[Any], dialect: Any) -> tuple[Callable[[Any], Any] | None, Any]:
    """(its processor, its own value: a literal's, or _NOTHING where a call must give it)."""
    process = bind.type.dialect_impl(dialect).bind_processor(dialect)
    if bind.callable is not None:
        raise NotImplementedError("direct.rows: a parameter whose value is a callable")
    own = _NOTHING if bind.required else bind.value
    return process, own
