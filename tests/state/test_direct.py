"""The hot statements run on the DBAPI cursor (state/direct.py): the same rows, values
and Python types as Session.execute gives, inside the session's transaction, errors
raised as SQLAlchemy raises them, on both databases."""

from __future__ import annotations

from typing import NamedTuple

import pytest
from sqlalchemy import (
    bindparam,
    create_engine,
    event,
    exc,
    insert,
    literal,
    select,
    text,
    update,
)
from sqlalchemy.pool import NullPool

from tpuq.spec import JobSpec
from tpuq.state import direct, jobs, outage
from tpuq.state.transitions import JOBS

# JSON, Boolean, float, NULL, a literal and a bound parameter: what a type does to a value
# on its way in and out is the part a raw cursor would get wrong
MIXED = select(JOBS.c.id, JOBS.c.command, JOBS.c.env, JOBS.c.requeue_on_preempt,
               JOBS.c.session, JOBS.c.grace_s, JOBS.c.time_limit_s, JOBS.c.chips,
               literal("x").label("word"), (JOBS.c.priority + 1).label("next")) \
    .where(JOBS.c.owner == bindparam("who")).order_by(JOBS.c.id)
SET_COMMAND = update(JOBS).where(JOBS.c.id == bindparam("tq_job")) \
    .values(command=bindparam("command", type_=JOBS.c.command.type)) \
    .returning(JOBS.c.id, JOBS.c.command)
BY_ID = select(JOBS.c.id, JOBS.c.state).where(JOBS.c.id == bindparam("tq_job"))


def _queue(db, owner="ann", **kw) -> int:  # type: ignore[no-untyped-def]
    with db.write() as s:
        return jobs.submit(s, JobSpec(command=["python", "train.py", "--lr", "3e-4"], cwd="/",
                                      owner=owner, team="t", env={"A": "1", "B": "ü é"}, **kw))


def test_rows_hold_what_session_execute_reads_with_the_same_types(db) -> None:  # type: ignore[no-untyped-def]
    first = _queue(db, requeue_on_preempt=False, time_limit_s=90.5, chips=2)
    second = _queue(db)
    _queue(db, owner="bob")
    with db.read() as s:
        got = direct.rows(s, MIXED, {"who": "ann"})
        want = s.execute(MIXED, {"who": "ann"}).all()
    assert [r.id for r in got] == [first, second], "the bound parameter chose the rows"
    assert [tuple(r) for r in got] == [tuple(r) for r in want]
    for mine, theirs in zip(got, want, strict=True):
        assert [type(v) for v in mine] == [type(v) for v in theirs], mine
    assert got[0].command == ["python", "train.py", "--lr", "3e-4"] and \
        got[0].env == {"A": "1", "B": "ü é"}, "JSON read back as lists and dicts"
    assert (got[0].requeue_on_preempt, got[0].session) == (False, False)
    assert (got[0].time_limit_s, got[1].time_limit_s, got[0].word) == (90.5, None, "x")


def test_a_write_runs_in_the_sessions_transaction_with_its_values_converted(db) -> None:  # type: ignore[no-untyped-def]
    job = _queue(db)
    with pytest.raises(RuntimeError), db.write() as s:
        row = direct.first(s, SET_COMMAND, {"tq_job": job, "command": ["echo", "ünï"]})
        assert (row.id, row.command) == (job, ["echo", "ünï"]), "RETURNING, converted back"
        assert s.execute(select(JOBS.c.command).where(JOBS.c.id == job)).scalar_one() == \
            ["echo", "ünï"], "the session sees it: one transaction"
        raise RuntimeError("roll back")
    with db.read() as s:
        assert direct.first(s, BY_ID, {"tq_job": job}).state == "queued"
        assert s.execute(select(JOBS.c.command).where(JOBS.c.id == job)).scalar_one()[0] \
            == "python", "rolled back with the session"
        assert direct.first(s, BY_ID, {"tq_job": job + 100}) is None


def test_a_database_error_is_sqlalchemys_and_the_session_goes_on(db) -> None:  # type: ignore[no-untyped-def]
    job = _queue(db)
    every = list(JOBS.c)  # every column of a job, its id too: a copy
    twice = insert(JOBS).from_select([c.name for c in every], select(*every)
                                     .where(JOBS.c.id == bindparam("tq_job")))
    with pytest.raises(exc.IntegrityError), db.write() as s:
        direct.rows(s, twice, {"tq_job": job})  # the same primary key again
    with db.read() as s:
        assert direct.first(s, BY_ID, {"tq_job": job}) is not None


class IdState(NamedTuple):
    id: int
    state: str


def test_a_row_type_given_is_used_and_must_be_the_statements_columns(db) -> None:  # type: ignore[no-untyped-def]
    job = _queue(db)

    class Wrong(NamedTuple):
        state: str
        id: int

    with db.read() as s:
        row = direct.rows(s, BY_ID, {"tq_job": job}, row=IdState)[0]
        assert type(row) is IdState and row == (job, "queued")
        with pytest.raises(TypeError, match="not the statement's columns"):
            direct.rows(s, select(JOBS.c.id, JOBS.c.state).where(JOBS.c.id == job), row=Wrong)


def test_what_it_cannot_run_faithfully_is_refused(db) -> None:  # type: ignore[no-untyped-def]
    with db.read() as s:
        with pytest.raises(NotImplementedError):
            direct.rows(s, select(JOBS.c.id).where(JOBS.c.id.in_([1, 2])))
        with pytest.raises(exc.ArgumentError, match="tq_job"):
            direct.rows(s, BY_ID, {})


def test_the_engines_statement_listeners_hear_it(db) -> None:  # type: ignore[no-untyped-def]
    job = _queue(db)
    heard: list[str] = []
    event.listen(db.engine, "before_cursor_execute", lambda c, cur, sql, *rest: heard.append(sql))
    with db.write() as s:
        direct.first(s, BY_ID, {"tq_job": job})
    assert [sql for sql in heard if "FROM jobs" in sql] == [str(BY_ID.compile(
        dialect=db.engine.dialect))]


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_a_lost_connection_is_an_outage_and_is_not_handed_out_again(db) -> None:  # type: ignore[no-untyped-def]
    job = _queue(db)
    server = create_engine(db.engine.url, poolclass=NullPool)  # a connection of its own
    try:
        with pytest.raises(exc.DBAPIError) as out, db.read() as s:
            pid = s.execute(text("SELECT pg_backend_pid()")).scalar_one()
            with server.connect() as other:  # the server ends this session's connection
                other.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
            try:
                direct.first(s, BY_ID, {"tq_job": job})
            except exc.DBAPIError as e:
                lost = e
                raise
    finally:
        server.dispose()
    assert out.value is lost, "invalidated: the session's rollback had nothing to send"
    assert lost.connection_invalidated and outage.is_outage(lost)
    with db.read() as s:
        assert direct.first(s, BY_ID, {"tq_job": job}).id == job, "a fresh connection"


SET_DROPPED = update(JOBS).where(JOBS.c.id == bindparam("tq_job")) \
    .values(env_dropped=bindparam("dropped", type_=JOBS.c.env_dropped.type))


def test_a_value_is_stored_as_session_execute_stores_it_none_included(db) -> None:  # type: ignore[no-untyped-def]
    mine, theirs = _queue(db), _queue(db)
    for dropped in (None, ["TERM"]):  # None in a JSON column: SQLAlchemy writes JSON null
        with db.write() as s:
            direct.rows(s, SET_DROPPED, {"tq_job": mine, "dropped": dropped})
            s.execute(SET_DROPPED, {"tq_job": theirs, "dropped": dropped})
        with db.read() as s:
            stored = dict(s.execute(text("SELECT id, env_dropped FROM jobs WHERE id IN "
                                         "(:a, :b)"), {"a": mine, "b": theirs}).all())
        assert stored[mine] == stored[theirs], dropped


@pytest.mark.parametrize("has_pipeline", [True, False])
def test_statements_sent_together_read_what_each_alone_reads_in_order(  # type: ignore[no-untyped-def]
        db, request, has_pipeline) -> None:
    """rows_of_each: one pipeline on PostgreSQL, run in the order given (a write first is
    seen by the read after it), each with its own parameters and row type; with a libpq
    older than 14 (no pipeline mode), one after another, the same rows."""
    if not has_pipeline:
        request.getfixturevalue("without_pipeline_mode")
    first, second = _queue(db), _queue(db, owner="bob")
    with db.write() as s:
        alone = [direct.rows(s, MIXED, {"who": "ann"}), direct.rows(s, BY_ID, {"tq_job": second})]
        written, mixed, one = direct.rows_of_each(s, [
            (SET_COMMAND, {"tq_job": first, "command": ["a", "b"]}, None),
            (MIXED, {"who": "ann"}, None), (BY_ID, {"tq_job": second}, IdState)])
    assert [tuple(r) for r in written] == [(first, ["a", "b"])]
    assert mixed[0].command == ["a", "b"], "the write before it was seen"
    assert [r[2:] for r in mixed] == [r[2:] for r in alone[0]]
    assert one == alone[1] and type(one[0]) is IdState


def test_an_error_among_statements_sent_together_is_sqlalchemys(db) -> None:  # type: ignore[no-untyped-def]
    job = _queue(db)
    every = list(JOBS.c)
    twice = insert(JOBS).from_select([c.name for c in every], select(*every)
                                     .where(JOBS.c.id == bindparam("tq_job")))
    with pytest.raises(exc.IntegrityError), db.write() as s:
        direct.rows_of_each(s, [(BY_ID, {"tq_job": job}, None), (twice, {"tq_job": job}, None),
                                (BY_ID, {"tq_job": job}, None)])
    with db.read() as s:
        assert direct.first(s, BY_ID, {"tq_job": job}) is not None, "the session goes on"


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_a_connection_lost_under_statements_sent_together_is_an_outage(db) -> None:  # type: ignore[no-untyped-def]
    job = _queue(db)
    server = create_engine(db.engine.url, poolclass=NullPool)
    try:
        with pytest.raises(exc.DBAPIError) as out, db.read() as s:
            pid = s.execute(text("SELECT pg_backend_pid()")).scalar_one()
            with server.connect() as other:
                other.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
            direct.rows_of_each(s, [(BY_ID, {"tq_job": job}, None)] * 2)
    finally:
        server.dispose()
    assert out.value.connection_invalidated and outage.is_outage(out.value)
    with db.read() as s:
        assert direct.first(s, BY_ID, {"tq_job": job}).id == job


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_a_statement_run_over_and_over_is_prepared_on_the_server(db) -> None:  # type: ignore[no-untyped-def]
    """After a burst opened several pooled connections, one thread's transactions still
    go to one of them (the last returned), so a statement run there again and again is
    prepared once (psycopg, after its fifth run on a connection) instead of parsed and
    planned every time on each connection in turn."""
    from sqlalchemy import text

    job = _queue(db)
    burst = [db.engine.connect() for _ in range(3)]  # three connections in the pool
    for c in burst:
        c.execute(text("SELECT 1"))
    for c in burst:
        c.close()
    for _ in range(6):
        with db.write() as s:
            direct.first(s, BY_ID, {"tq_job": job})
    with db.read() as s:
        prepared = s.execute(text("SELECT statement FROM pg_prepared_statements")).scalars()
        assert any("FROM jobs" in sql for sql in prepared)
