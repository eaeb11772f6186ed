"""Rows for every table and column of the schema at any revision, made from the schema.

The tables are read from the database itself (SQLAlchemy's reflection at whatever
revision it is at), so a migration that adds a table or a column gets rows for it
without a line here. Values follow the column's type and keys; the columns whose values
are restricted (a CHECK constraint, a state the code reads back) take them from
DOMAINS, each cycled through so every state, outcome and kind appears. A column the
database refuses a generic value for (a new CHECK constraint) fails the insert, naming
the column to add here. `check` then reads every row written so far back and compares
it with what was written, column by column.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Connection,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    func,
    insert,
    select,
    text,
)

from tpuq.state.db import SCHEMA_HEAD

T0 = 1_790_000_000.0  # a database-clock time the rows are written around
STATES = ["queued", "held", "assigned", "running", "preempting", "succeeded", "failed",
          "cancelled", "timeout"]
OUTCOMES = ["succeeded", "failed", "cancelled", "preempted", "requeued", "host_error", "lost",
            "timeout"]


def _function_call(n: int) -> bytes:
    import cloudpickle

    return bytes(cloudpickle.dumps((max, (n, 1), {})))


def _function_result(n: int) -> bytes:
    from tpuq import runfn

    return runfn.dump(("ok", n))


# table.column -> the values it takes, in turn (a list), or a function of the row's serial
DOMAINS: dict[str, list[Any] | Callable[[int], Any]] = {
    "jobs.state": STATES,
    "jobs.command": lambda n: ["python", f"train{n}.py", "--steps", str(n)],
    "jobs.env": lambda n: {"PATH": "/usr/bin", "RUN": str(n)},
    "jobs.chips": [4, 1, 2, None],
    "jobs.tpu_type": ["v4-8", None],
    "jobs.stop_signal": ["SIGTERM", "SIGINT"],
    "jobs.grace_s": [30.0, 0.0],
    "jobs.time_limit_s": [3600.0, None],
    "jobs.max_retries": [0, 3],
    "jobs.stop_request": [None, "cancel", "preempt", "timeout"],
    "jobs.workers": [None, None, 2],
    "jobs.array_throttle": [2, None],
    "jobs.notify": ["end", "end,fail,preempt", None],
    "jobs.notify_to": ["json://localhost:1/hook", None],
    "attempts.outcome": OUTCOMES,
    "attempts.chips": [[0, 1, 2, 3], [0], [1, 2]],
    "job_events.from_state": [None, *STATES],
    "job_events.to_state": STATES,
    "job_events.actor": ["agent", "scheduler", "alice"],
    "hosts.tpu_type": ["v4-8", "v5litepod-8"],
    "hosts.chips": [[0, 1, 2, 3]],
    "hosts.slice_type": ["v4-32", None],
    "teams.max_chips_by_type": [{"v4-8": 8}, {}],
    "teams.budget_period": ["month", "week", "day"],
    "job_deps.kind": ["ok", "any"],
    "gang_workers.state": ["assigned", "ready", "running", "ended"],
    "gang_workers.outcome": OUTCOMES,
    "notifications.state": ["pending", "sent", "failed", "skipped"],
    "notifications.event": ["succeeded", "failed", "cancelled", "timeout", "preempted"],
    "job_functions.payload": _function_call,
    "job_functions.result": _function_result,
    "fleet_members.phase": ["waiting", "creating", "up", "deleting"],
    "fleet_slots.spec": lambda n: {"name": f"slot{n}", "accelerator_type": "v4-8",
                                   "runtime_version": "tpu-ubuntu2204-base", "project": "p",
                                   "zone": "us-central2-b", "capacity": "spot", "count": 1,
                                   "labels": {}},
    # code that may write them (migrations/versions/0015): today's
    "attempts.code_revision": [SCHEMA_HEAD],
    "hosts.code_revision": [SCHEMA_HEAD, None],
}
ROWS = {"jobs": len(STATES) + 1}  # rows per table and fill; the rest get DEFAULT_ROWS
DEFAULT_ROWS = 3
NOT_TABLES = {"alembic_version"}


def reflect(conn: Connection) -> MetaData:
    md = MetaData()
    md.reflect(conn)
    for name in NOT_TABLES & set(md.tables):
        md.remove(md.tables[name])
    return md


@dataclass
class Rows:
    """Every row written, by table and primary key: the columns it was written with."""

    written: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = field(default_factory=dict)
    serial: int = 0
    schemas: dict[str, MetaData] = field(default_factory=dict)

    def fill(self, conn: Connection) -> int:
        """Rows for every table of the schema `conn` is at now; how many."""
        n = 0
        for table in self.schema(conn).sorted_tables:
            n += self._insert(conn, table, ROWS.get(table.name, DEFAULT_ROWS))
        return n

    def schema(self, conn: Connection) -> MetaData:
        """The tables at the revision `conn` is at (read once per revision)."""
        rev = conn.scalar(text("SELECT version_num FROM alembic_version"))
        if rev not in self.schemas:
            self.schemas[rev] = reflect(conn)
        return self.schemas[rev]

    def _insert(self, conn: Connection, table: Table, n: int) -> int:
        mine = self.written.setdefault(table.name, {})
        rows = []
        for k in range(len(mine), len(mine) + n):
            self.serial += 1
            rows.append(_row(table, self.serial, k, self.written))
        pk = [c.name for c in table.primary_key.columns]
        generated = [c for c in pk if c not in rows[0]]
        stmt = insert(table)
        try:
            if generated:
                got = conn.execute(stmt.returning(*(table.c[c] for c in generated),
                                                  sort_by_parameter_order=True), rows).all()
                for row, values in zip(rows, got):
                    row.update(dict(zip(generated, values)))
            else:
                conn.execute(stmt, rows)
        except Exception as e:
            raise AssertionError(f"{table.name}: the generated rows {rows} were refused ({e}); "
                                 "give the column its values in DOMAINS") from e
        for row in rows:
            mine[tuple(row[c] for c in pk)] = row
        return n

    def forget_what_is_gone(self, conn: Connection) -> None:
        """After a downgrade: what the schema no longer has is not expected back."""
        md = self.schema(conn)
        for name in list(self.written):
            if name not in md.tables:
                del self.written[name]
                continue
            cols = set(md.tables[name].c.keys())
            for row in self.written[name].values():
                for col in set(row) - cols:
                    del row[col]

    def check(self, conn: Connection) -> int:
        """Every row written is still there with the values it was written with."""
        md = self.schema(conn)
        n = 0
        for name, rows in self.written.items():
            assert name in md.tables, f"table {name} is gone, with its {len(rows)} rows"
            table = md.tables[name]
            pk = [c.name for c in table.primary_key.columns]
            now = {tuple(r[c] for c in pk): r
                   for r in conn.execute(select(table)).mappings()}
            for key, row in rows.items():
                got = now.get(key)
                assert got is not None, f"{name} row {key} is gone"
                for col, value in row.items():
                    assert _same(got[col], value), (
                        f"{name} row {key}: {col} was {value!r}, is {got[col]!r}")
                n += 1
        return n

    def uncovered(self, conn: Connection) -> list[str]:
        """Columns of the schema now that no row has a value in."""
        md = self.schema(conn)
        return [f"{t.name}.{c.name}" for t in md.sorted_tables for c in t.c
                if not conn.scalar(select(func.count()).select_from(t)
                                   .where(c.is_not(None)))]

    def ids(self, table: str) -> Iterator[Any]:
        for key in self.written.get(table, {}):
            yield key[0]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, memoryview):
        a = bytes(a)
    return bool(a == b)


def _row(table: Table, serial: int, k: int,
         written: dict[str, dict[tuple[Any, ...], dict[str, Any]]]) -> dict[str, Any]:
    """The k-th row of `table` (serial: unique across every row written)."""
    keys = {c.name for c in table.primary_key.columns}
    for u in table.constraints:
        if type(u).__name__ == "UniqueConstraint":
            keys |= {c.name for c in u.columns}
    row: dict[str, Any] = {}
    for j, fk in enumerate(sorted(table.foreign_key_constraints, key=lambda f: f.column_keys)):
        (col,), (parent,) = fk.column_keys, [e.column for e in fk.elements]
        choices = [r[parent.name] for r in written.get(parent.table.name, {}).values()
                   if r.get(parent.name) is not None]
        row[col] = choices[(k + j) % len(choices)] if choices else None
    for c in table.c:
        if c.name in row:
            continue
        if c.primary_key and len(table.primary_key.columns) == 1 and \
                isinstance(c.type, Integer) and not c.foreign_keys:
            continue  # the database numbers it
        domain = DOMAINS.get(f"{table.name}.{c.name}")
        if domain is not None:
            row[c.name] = domain(serial) if callable(domain) else domain[k % len(domain)]
        elif c.nullable and c.name not in keys and k % 3 == 2:
            row[c.name] = None  # real rows have empty columns too
        else:
            row[c.name] = _generic(c, serial, key=c.name in keys)
    return row


def _generic(c: Any, serial: int, key: bool) -> Any:
    t = c.type
    if isinstance(t, JSON):
        return {"n": serial}
    if isinstance(t, Boolean):
        return serial % 2 == 0
    if isinstance(t, Integer):
        return serial if key else 1 + serial % 3
    if isinstance(t, Float):
        return T0 + serial
    if isinstance(t, LargeBinary):
        return pickle.dumps(serial)
    if isinstance(t, String):  # Text too
        n = getattr(t, "length", None) or 200
        return f"{c.name[:6]}{serial}"[:n]
    raise AssertionError(f"{c.table.name}.{c.name}: no generic value for {t!r}; "
                         "give the column its values in DOMAINS")
