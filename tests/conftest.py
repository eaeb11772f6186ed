"""Shared fixtures: a stack per deployment (embedded SQLite, or team PostgreSQL + Redis)
and fake TPU hosts. End-to-end tests that take `stack` run against both deployments."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import FakeHost, Stack
from tests.services import PostgresServer, RedisServer, create_pg_database, drop_pg_database


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database, dropped afterwards."""
    try:
        url = create_pg_database()
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"PostgreSQL is required on 127.0.0.1:5432 (.ci/run starts it): {e}")
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def guarded_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A private Redis as a team deployment runs it: its default user (the agents' and
    admins' account) has a password; users get accounts of their own (`tpuq user add`)."""
    server = RedisServer(tmp_path / "redis-guarded", password=uuid.uuid4().hex).start()
    try:
        yield server
    finally:
        server.stop()


def _team_stack(request: pytest.FixtureRequest, home: Path, pg: str | None = None,
                redis_fixture: str = "redis_server") -> Stack:
    """The team deployment: PostgreSQL (a fresh database on the machine's server unless
    `pg` names another) and a private Redis, upgraded and ready for agents."""
    pg = pg or request.getfixturevalue("pg_url")
    redis = request.getfixturevalue(redis_fixture)
    s = Stack(home=home, extra={"TPUQ_DATABASE_URL": pg, "TPUQ_BROKER_URL": redis.url})
    s.tpuq("db", "upgrade")
    s.redis = redis  # type: ignore[attr-defined]
    return s


def _stack(request: pytest.FixtureRequest, home: Path) -> Iterator[Stack]:
    """The deployment `request.param` names, in `home`; cleaned up after the test."""
    if request.param == "team" and request.node.get_closest_marker("embedded_only"):
        pytest.skip("embedded deployment only")
    s = _team_stack(request, home) if request.param == "team" else Stack(home=home)
    s.deployment = request.param  # type: ignore[attr-defined]
    try:
        yield s
    finally:
        s.cleanup()


@pytest.fixture(params=["embedded", "team"])
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    """The whole tpuq of one test; `embedded_only` tests skip the team deployment."""
    yield from _stack(request, tmp_path / "home")


@pytest.fixture(params=["embedded", "team"])
def open_stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    """`stack` with a TPUQ_HOME every account can reach, for jobs that run as their owner
    (pytest's temporary directories are the test user's alone)."""
    home = Path(tempfile.mkdtemp(prefix="tpuq-open-"))
    home.chmod(0o755)
    try:
        yield from _stack(request, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def team_stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    s = _team_stack(request, tmp_path / "home")
    try:
        yield s
    finally:
        s.cleanup()


@pytest.fixture
def guarded_stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    """`team_stack` whose broker lets in only the agents' account and users' own."""
    s = _team_stack(request, tmp_path / "home", redis_fixture="guarded_redis")
    try:
        yield s
    finally:
        s.cleanup()


@pytest.fixture
def private_pg() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this test's own, which the test may stop and restart."""
    server = PostgresServer()
    try:
        yield server.start()
    finally:
        server.remove()


@pytest.fixture
def team_stack_private_pg(request: pytest.FixtureRequest, tmp_path: Path,
                          private_pg: PostgresServer) -> Iterator[Stack]:
    """`team_stack` on a private PostgreSQL server (`stack.pg`) instead of the machine's."""
    s = _team_stack(request, tmp_path / "home", pg=private_pg.url)
    s.pg = private_pg  # type: ignore[attr-defined]
    try:
        yield s
    finally:
        if private_pg.pid is None:  # a test that failed while the server was down:
            private_pg.start()  # cleanup finds the job processes to kill in the database
        s.cleanup()


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path / "host-a", name="tpu-a", chips=4)
