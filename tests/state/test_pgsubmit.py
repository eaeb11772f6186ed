"""A team submit with no agent, on psycopg alone (state/pgsubmit.py), against the
handlers' submit through SQLAlchemy: the same rows, warnings and refusals, for a login
role and for the agents' own role, on a real PostgreSQL; what it declines, the handlers
take, and the job is queued once."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import JSON, text

from tests.state.rows import register_host
from tpuq.api import handlers
from tpuq.client import Client
from tpuq.protocol import Refusal, Submit, Submitted
from tpuq.settings import Settings
from tpuq.spec import SPEC_FIELDS, JobSpec
from tpuq.state import admins, logusage, roles, teams
from tpuq.state.db import Database
from tpuq.state.models import Job
from tpuq.state.pgconnect import WAKE_CHANNEL
from tpuq.state.pgsubmit import JSON_FIELDS, Submitter, serves, submit_as
from tpuq.state.versions import SCHEMA_HEAD


@pytest.fixture
def pg(pg_url: str) -> Iterator[tuple[Database, str, dict[str | None, str | None]]]:
    """A migrated database with hosts and a capped team; login roles for a member of it
    (alice), for someone of no team (carol) and for an admin (dora), dropped after."""
    db = Database(pg_url)
    db.upgrade()
    alice, carol, dora = (f"{n}_{secrets.token_hex(3)}" for n in ("alice", "carol", "dora"))
    with db.write() as s:
        for name in (alice, carol, dora):
            roles.create_login(s, name)
        admins.add(s, dora)  # an admin by the database's word, of no team
        register_host(s, "h4", tpu_type="v4-8", chips=(0, 1, 2, 3))
        register_host(s, "h8", tpu_type="v5litepod-8", chips=tuple(range(8)))
        teams.set_quota(s, "lab", max_chips=8, max_chips_per_user=2,
                        max_chips_by_type={"v4": 4})
        teams.add_member(s, "lab", alice)
        teams.set_quota(s, "open", max_chips=1)  # the open team, capped too
    try:
        # by name; None: the agents' own role (here the superuser the URL names)
        yield db, pg_url, {"alice": alice, "carol": carol, "dora": dora, None: None}
    finally:
        with db.write() as s:
            for name in (alice, carol, dora):
                roles.drop_login(s, name)
        db.dispose()


def _settings(url: str, role: str | None, tmp: Any) -> Settings:
    if role is not None:
        url = url.replace("postgresql+psycopg://postgres@", f"postgresql+psycopg://{role}@", 1)
    return Settings(home=str(tmp), database_url=url, broker_url="redis://127.0.0.1:1/0",
                    agent_socket=str(tmp / "none.sock"), team="open", user="agentsuser")


def _request(team: str = "open", held: bool = False, **fields: Any) -> Submit:
    spec = JobSpec(command=["/bin/echo", "ü", "x y"], cwd="/tmp", owner="whoever", team=team,
                   env={"A": "1", "B": "ß"}, **fields)
    return Submit(spec=spec.to_dict(), held=held)


def _by_handlers(cfg: Settings, req: Submit) -> Any:
    """The reply of the handlers (api/handlers.py), as an agent's socket or a client with
    its database open asks them."""
    client = Client(cfg)
    client._database()  # an open database: the client asks the handlers
    try:
        return client.call(req)
    finally:
        client.close()


def _by_sqlalchemy(cfg: Settings, req: Submit, monkeypatch: Any) -> Any:
    """The handlers' reply with state/pgsubmit.py out of the way: SQLAlchemy's rows."""
    with monkeypatch.context() as m:
        m.setattr(handlers.pgsubmit, "submit_as", lambda *_a, **_k: None)
        return _by_handlers(cfg, req)


def _row(url: str, job_id: int) -> tuple[dict[str, Any], list[Any]]:
    """The job's row and its events, every value as the server's text (a JSON null is
    'null', an SQL NULL None), but for what differs between any two jobs."""
    with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as c:
        names = [r[0] for r in c.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'jobs' "
            "ORDER BY ordinal_position")]
        values = c.execute(f"SELECT {', '.join(f'{n}::text' for n in names)} FROM jobs "
                           "WHERE id = %s", (job_id,)).fetchone()
        events = c.execute("SELECT from_state, to_state, attempt, reason, actor "
                           "FROM job_events WHERE job_id = %s", (job_id,)).fetchall()
    row = dict(zip(names, values, strict=True))
    for varying in ("id", "submitted_at", "updated_at", "state_since"):
        row.pop(varying, None)
    return row, events


CASES = [  # (caller, request): what admission says to each, both ways
    ("alice", _request()),  # no host of any type asked: warned of nothing, capped at 1
    ("alice", _request(chips=1, name="n", priority=-3, max_retries=2, time_limit_s=60.0,
                       env_dropped=["TPU_X"], option_sources={"chips": "line"},
                       begin_at=2e9, output="/tmp/o", tcmalloc=False, session=False)),
    ("alice", _request(held=True, chips=1)),
    ("alice", _request(chips=2)),  # over the open team's cap
    ("alice", _request(chips=3, team="lab")),  # no host offers 3 chips
    ("alice", _request(chips=2, team="lab", tpu_type="v4-8")),
    ("alice", _request(chips=4, team="lab", tpu_type="v4-8")),  # over the per-user cap
    ("alice", _request(chips=1, tpu_type="v6e-8")),  # no host of that type yet: a warning
    ("alice", _request(chips=1, tpu_type="v9-1")),  # no such type
    ("alice", _request(chips=16, tpu_type="v4-8")),  # more than a host has
    ("carol", _request(chips=1, team="lab")),  # not a member
    ("dora", _request(chips=2, team="lab", session=True)),  # an admin: any team
    (None, _request(chips=8, team="lab", tpu_type="v5litepod-8")),  # agents' role: admin
    (None, _request(chips=4, team="lab", tpu_type="v4-8")),  # the family's cap holds
]


def _counts(url: str) -> dict[str, int]:
    """Rows in every table: what a submit writes anywhere."""
    with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as c:
        tables = [r[0] for r in c.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        return {t: c.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}


def _written(url: str, submit: Any) -> tuple[Any, dict[str, int]]:
    """submit()'s reply, and how many rows it added to each table."""
    before = _counts(url)
    reply = submit()
    after = _counts(url)
    return reply, {t: after[t] - before[t] for t in after if after[t] != before[t]}


@pytest.mark.parametrize("who,req", CASES)
def test_the_same_rows_warnings_and_refusals_as_through_sqlalchemy(pg, tmp_path, monkeypatch,
                                                                   who, req):
    db, url, logins = pg
    cfg = _settings(url, logins[who], tmp_path)
    submitter = Submitter(cfg)
    try:  # a machine with no agent
        off_hosts, off_hosts_wrote = _written(url, lambda: submitter.submit(req))
    finally:
        submitter.close()
    assert off_hosts is not None, "a plain submit is served without SQLAlchemy"
    served = []
    with monkeypatch.context() as m:  # an agent's (and a client's with its database open)
        def spied(*a: Any, **k: Any) -> Any:
            served.append(reply := submit_as(*a, **k))
            return reply

        m.setattr(handlers.pgsubmit, "submit_as", spied)
        as_agent, as_agent_wrote = _written(url, lambda: _by_handlers(cfg, req))
    assert served == [as_agent], "the agent's handler served it on psycopg"
    slow, slow_wrote = _written(url, lambda: _by_sqlalchemy(cfg, req, monkeypatch))
    assert off_hosts_wrote == as_agent_wrote == slow_wrote
    for fast in (off_hosts, as_agent):
        assert type(fast) is type(slow)
        if isinstance(slow, Refusal):
            assert (fast.kind, fast.error) == (slow.kind, slow.error)
            continue
        assert isinstance(fast, Submitted) and isinstance(slow, Submitted)
        assert fast.warnings == slow.warnings and fast.tasks == slow.tasks == []
        assert fast.id != slow.id
        assert _row(url, fast.id) == _row(url, slow.id)


def test_every_field_of_a_request_it_does_not_write_is_declined() -> None:
    """A field of Submit other than the spec and `held` (one added later too) sends the
    request to the handlers."""
    values = {"array": [0, 1], "array_args": [["x"]], "throttle": 2, "after": [1],
              "after_any": [1], "after_tasks": [[1, 0]], "after_any_tasks": [[1, 0]],
              "function": "x", "later": "x"}
    for name, value in values.items():
        assert not serves(_request().replace(**{name: value}) if name != "later"
                          else _Later(**_request().as_dict(), later=value)), name
    assert set(Submit.field_names()) - set(values) == {"spec", "held", "deployment", "as_user"}
    assert serves(_request(held=True).replace(deployment="d", as_user="u"))


class _Later(Submit):
    """Submit with a field added after this path was written."""

    later: str = ""


def test_its_json_columns_are_the_models(pg) -> None:
    table: Any = Job.__table__
    assert JSON_FIELDS == {c.name for c in table.columns
                           if isinstance(c.type, JSON) and c.name in SPEC_FIELDS}


def test_what_it_declines_the_handlers_take_once(pg, tmp_path) -> None:
    db, url, logins = pg
    alice = logins["alice"]
    cfg = _settings(url, alice, tmp_path)
    with db.write() as s:  # alice's logs are over the budget on a host: its warning
        logusage.record(s, "h4", {alice: 10}, budget=5)
    declined = [_request(team="nope"), _request(chips=1), _request(tpu_type="v4-32")]
    assert all(serves(r) for r in declined)
    assert not any(serves(r) for r in (
        _request().replace(array=[0, 1]), _request().replace(after=[1]),
        _request().replace(function="x"), _request(notify_to="mailto://a@b"),
        _request(resubmit_of=1)))
    submitter = Submitter(cfg)
    try:
        assert [submitter.submit(r) for r in declined] == [None, None, None]
    finally:
        submitter.close()
    client = Client(cfg)
    try:
        unknown = client.call(declined[0])
        assert isinstance(unknown, Refusal) and "no team named 'nope'" in unknown.error
        over = client.call(declined[1])
        assert isinstance(over, Submitted)
        assert any("over the" in w for w in over.warnings), over.warnings
        sliced = client.call(declined[2])
        assert isinstance(sliced, Refusal) and "(a whole v4-32 slice)" in sliced.error
    finally:
        client.close()
    with db.read() as s:
        assert s.scalar(text("SELECT count(*) FROM jobs")) == 1


@pytest.mark.parametrize("revision,min_code,served", [
    ("0019", None, False),  # older: the handlers say to upgrade
    ("0099", "0099", False),  # newer, and it does not admit this code
    ("0099", SCHEMA_HEAD, True),  # newer, and it admits this code: used as usual
    (None, None, False),  # no revision at all
])
def test_a_schema_other_than_its_own_is_left_to_the_handlers_unless_it_admits_this_code(
        pg, tmp_path, revision, min_code, served) -> None:
    db, url, logins = pg
    alice = logins["alice"]

    def put(revision: str | None, min_code: str | None) -> None:
        with db.write() as s:
            s.execute(text("DELETE FROM alembic_version"))
            if revision:
                s.execute(text("INSERT INTO alembic_version VALUES (:v)"), {"v": revision})
            s.execute(text("DELETE FROM meta WHERE key = 'min_code'"))
            if min_code:
                s.execute(text("INSERT INTO meta VALUES ('min_code', :m)"), {"m": min_code})

    with db.read() as s:
        was = s.scalar(text("SELECT value FROM meta WHERE key = 'min_code'"))
    put(revision, min_code)
    submitter = Submitter(_settings(url, alice, tmp_path))
    try:
        reply = submitter.submit(_request(chips=1))
        assert isinstance(reply, Submitted) if served else reply is None, reply
        again = submitter.submit(_request(chips=1))  # the same connection, ready again
        assert isinstance(again, Submitted) if served else again is None, again
    finally:
        submitter.close()
        put(SCHEMA_HEAD, was)


def test_off_the_hosts_it_wakes_the_agents_once_the_job_is_committed_an_agent_not(
        pg, tmp_path) -> None:
    db, url, logins = pg
    alice = logins["alice"]
    cfg = _settings(url, alice, tmp_path)
    with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as listener:
        listener.execute(f"LISTEN {WAKE_CHANNEL}")
        listener.execute("LISTEN test_end")
        role = Database(cfg.database_url)
        try:  # the agent rings through its broker, after its answer
            as_agent = submit_as(role.engine, cfg, _request(chips=1), alice, False)
        finally:
            role.dispose()
        submitter = Submitter(cfg)
        try:
            reply = submitter.submit(_request(chips=1))
        finally:
            submitter.close()
        assert isinstance(as_agent, Submitted) and isinstance(reply, Submitted)
        with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as other:
            other.execute("NOTIFY test_end")  # heard after every wake-up committed before it
        heard = []
        for n in listener.notifies(timeout=10):
            heard.append(n.channel)
            if n.channel == "test_end":
                break
    assert heard == [WAKE_CHANNEL, "test_end"]
    with db.read() as s:
        assert s.scalar(text("SELECT state FROM jobs WHERE id = :i"), {"i": reply.id}) == "queued"


def test_a_commit_lost_on_its_way_is_said_to_be_unsure_and_not_redone(
        pg, tmp_path, monkeypatch) -> None:
    db, url, logins = pg
    alice = logins["alice"]
    landed = psycopg.Connection.commit

    def lost(conn: Any) -> None:  # the commit lands; its answer never comes back
        landed(conn)
        conn.close()
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    client = Client(_settings(url, alice, tmp_path))
    try:
        with monkeypatch.context() as m:
            m.setattr(psycopg.Connection, "commit", lost)
            reply = client.call(_request(chips=1))
    finally:
        client.close()
    assert isinstance(reply, Refusal) and "may or may not be in the queue" in reply.error
    assert "server closed the connection unexpectedly" in reply.error
    assert client._db is None, "not handed to the handlers, which would queue it again"
    with db.read() as s:
        assert s.scalar(text("SELECT count(*) FROM jobs")) == 1


def test_a_refused_spec_leaves_the_connection_ready_for_the_next(pg, tmp_path) -> None:
    db, url, logins = pg
    alice = logins["alice"]
    submitter = Submitter(_settings(url, alice, tmp_path))
    try:
        refused = submitter.submit(_request(chips=3, team="lab"))
        kept = submitter._conn
        queued = submitter.submit(_request(chips=1))
        assert isinstance(refused, Refusal) and "no host offers 3 chips" in refused.error
        assert isinstance(queued, Submitted) and submitter._conn is kept
    finally:
        submitter.close()


def test_a_connection_the_server_ended_between_submits_is_made_again(pg, tmp_path) -> None:
    db, url, logins = pg
    alice = logins["alice"]
    client = Client(_settings(url, alice, tmp_path))
    try:
        first = client.call(_request(chips=1))
        assert isinstance(first, Submitted)
        with db.write() as s:  # the server restarts under the kept connection
            ended = s.scalar(text("SELECT count(pg_terminate_backend(pid)) FROM "
                                  "pg_stat_activity WHERE usename = :u"), {"u": alice})
        assert ended == 1
        second = client.call(_request(chips=1))
        third = client.call(_request(chips=1))
        assert isinstance(second, Submitted) and isinstance(third, Submitted)
        assert client._db is None, "made again, without the handlers' SQLAlchemy"
    finally:
        client.close()
    with db.read() as s:
        ids = list(s.scalars(text("SELECT id FROM jobs ORDER BY id")))
    assert ids == [first.id, second.id, third.id], "each queued once"


def test_a_libpq_without_pipeline_mode_writes_the_same_rows(pg, tmp_path, request) -> None:
    db, url, logins = pg
    alice = logins["alice"]
    cfg = _settings(url, alice, tmp_path)
    req = _request(chips=1, name="same")
    pipelined = _by_handlers(cfg, req)
    request.getfixturevalue("without_pipeline_mode")
    submitter = Submitter(cfg)
    try:
        off_hosts = submitter.submit(req)
    finally:
        submitter.close()
    as_agent = _by_handlers(cfg, req)
    for reply in (off_hosts, as_agent):
        assert isinstance(reply, Submitted), reply
        assert reply.warnings == pipelined.warnings
        assert _row(url, reply.id) == _row(url, pipelined.id)
