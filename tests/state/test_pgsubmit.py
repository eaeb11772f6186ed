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
from tpuq.state import logusage, roles, teams
from tpuq.state.db import Database
from tpuq.state.models import Job
from tpuq.state.pgconnect import WAKE_CHANNEL
from tpuq.state.pgsubmit import JSON_FIELDS, Submitter, serves
from tpuq.state.versions import SCHEMA_HEAD


@pytest.fixture
def pg(pg_url: str) -> Iterator[tuple[Database, str, str, str]]:
    """A migrated database with hosts and a capped team; login roles for a member of it
    (alice) and for someone of no team (carol), dropped after."""
    db = Database(pg_url)
    db.upgrade()
    alice, carol = (f"{n}_{secrets.token_hex(3)}" for n in ("alice", "carol"))
    with db.write() as s:
        for name in (alice, carol):
            roles.create_login(s, name)
        register_host(s, "h4", tpu_type="v4-8", chips=(0, 1, 2, 3))
        register_host(s, "h8", tpu_type="v5litepod-8", chips=tuple(range(8)))
        teams.set_quota(s, "lab", max_chips=8, max_chips_per_user=2,
                        max_chips_by_type={"v4": 4})
        teams.add_member(s, "lab", alice)
        teams.set_quota(s, "open", max_chips=1)  # the open team, capped too
    try:
        yield db, pg_url, alice, carol
    finally:
        with db.write() as s:
            for name in (alice, carol):
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
    (None, _request(chips=8, team="lab", tpu_type="v5litepod-8")),  # agents' role: admin
    (None, _request(chips=4, team="lab", tpu_type="v4-8")),  # the family's cap holds
]


@pytest.mark.parametrize("who,req", CASES)
def test_the_same_rows_warnings_and_refusals_as_through_sqlalchemy(pg, tmp_path, monkeypatch,
                                                                   who, req):
    db, url, alice, carol = pg
    role = {"alice": alice, "carol": carol, None: None}[who]
    cfg = _settings(url, role, tmp_path)
    submitter = Submitter(cfg)
    try:
        off_hosts = submitter.submit(req)  # a machine with no agent
    finally:
        submitter.close()
    assert off_hosts is not None, "a plain submit is served without SQLAlchemy"
    as_agent = _by_handlers(cfg, req)  # an agent's (and a client's with its database open)
    slow = _by_sqlalchemy(cfg, req, monkeypatch)
    for fast in (off_hosts, as_agent):
        assert type(fast) is type(slow)
        if isinstance(slow, Refusal):
            assert (fast.kind, fast.error) == (slow.kind, slow.error)
            continue
        assert isinstance(fast, Submitted) and isinstance(slow, Submitted)
        assert fast.warnings == slow.warnings and fast.tasks == slow.tasks == []
        assert fast.id != slow.id
        assert _row(url, fast.id) == _row(url, slow.id)


def test_its_json_columns_are_the_models(pg) -> None:
    table: Any = Job.__table__
    assert JSON_FIELDS == {c.name for c in table.columns
                           if isinstance(c.type, JSON) and c.name in SPEC_FIELDS}


def test_what_it_declines_the_handlers_take_once(pg, tmp_path) -> None:
    db, url, alice, _ = pg
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


def test_a_schema_other_than_its_own_is_left_to_the_handlers(pg, tmp_path) -> None:
    db, url, alice, _ = pg
    with db.write() as s:
        s.execute(text("UPDATE alembic_version SET version_num = '0019'"))
    submitter = Submitter(_settings(url, alice, tmp_path))
    try:
        assert submitter.submit(_request()) is None
    finally:
        submitter.close()
        with db.write() as s:
            s.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": SCHEMA_HEAD})


def test_it_wakes_the_agents_once_the_job_is_committed(pg, tmp_path) -> None:
    db, url, alice, _ = pg
    with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as listener:
        listener.execute(f"LISTEN {WAKE_CHANNEL}")
        submitter = Submitter(_settings(url, alice, tmp_path))
        try:
            reply = submitter.submit(_request(chips=1))
        finally:
            submitter.close()
        assert isinstance(reply, Submitted)
        heard = [n.channel for n in listener.notifies(timeout=10, stop_after=1)]
    assert heard == [WAKE_CHANNEL]
    with db.read() as s:
        assert s.scalar(text("SELECT state FROM jobs WHERE id = :i"), {"i": reply.id}) == "queued"


def test_a_connection_the_server_ended_between_submits_is_made_again(pg, tmp_path) -> None:
    db, url, alice, _ = pg
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
    finally:
        client.close()
    with db.read() as s:
        ids = list(s.scalars(text("SELECT id FROM jobs ORDER BY id")))
    assert ids == [first.id, second.id, third.id], "each queued once"


def test_a_libpq_without_pipeline_mode_writes_the_same_rows(pg, tmp_path, request) -> None:
    db, url, alice, _ = pg
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
