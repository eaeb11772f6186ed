"""Signing in as a PostgreSQL role: PostgreSQL checks the password, and a server that
checks none (trust) is never taken at its word."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from tests.services import PostgresServer
from tpuq.settings import Settings
from tpuq.state import roles
from tpuq.state.db import Database
from tpuq.web import auth
from tpuq.web.app import create_app

HBA = """# the owner by trust (the tests' admin), everyone else by password
local all postgres trust
host all postgres 127.0.0.1/32 trust
host all all 127.0.0.1/32 scram-sha-256
"""


@pytest.fixture(scope="module")
def checked_server() -> Iterator[PostgresServer]:
    """A private PostgreSQL that checks every password but its owner's."""
    server = PostgresServer().init()
    (server.data / "pg_hba.conf").write_text(HBA)
    server.start()
    try:
        yield server
    finally:
        server.remove()


def deployment(url: str) -> tuple[Settings, Database]:
    db = Database(url)
    db.upgrade()
    return Settings(home="/tmp/tpuq-web-pw", host="t", database_url=url), db


def test_the_servers_word_on_a_roles_password(checked_server: PostgresServer) -> None:
    settings, db = deployment(checked_server.url.replace("+psycopg", ""))
    name, password = f"web_{secrets.token_hex(4)}", "right-horse-battery"
    try:
        with db.write() as s:
            roles.create_login(s, name, password=password)
        assert auth.check_password(settings, name, password)
        assert not auth.check_password(settings, name, "wrong")
        assert not auth.check_password(settings, "nobody_here", password)
        c = TestClient(create_app(settings, db), follow_redirects=False)
        assert c.post("/login", data={"user": name, "password": "wrong"}).status_code == 401
        r = c.post("/login", data={"user": name, "password": password})
        assert r.status_code == 303
        assert f"{name}</span>" in c.get("/", headers={"accept": "text/html"}).text
    finally:
        with db.write() as s:
            roles.drop_login(s, name)
        db.dispose()


def test_a_server_that_trusts_everyone_is_no_proof(pg_url: str) -> None:
    """This machine's server lets every role in without a password (trust)."""
    settings, db = deployment(pg_url)
    try:
        with pytest.raises(auth.PasswordsNotChecked):
            auth.check_password(settings, "postgres", "anything")
        c = TestClient(create_app(settings, db), follow_redirects=False)
        r = c.post("/login", data={"user": "postgres", "password": "anything"})
        assert r.status_code == 401 and "without a password (trust)" in r.text
    finally:
        db.dispose()
