"""A dashboard over a real database (SQLite, and PostgreSQL), with people signed in by
tokens issued the way `tpuq web token add` issues them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.state.rows import register_host
from tpuq.settings import Settings
from tpuq.spec import JobSpec
from tpuq.state import admins, jobs, webtokens
from tpuq.state.db import Database
from tpuq.web.app import create_app

OWNER, OTHER, ADMIN = "alice", "bob", "carol"


@dataclass
class Site:
    db: Database
    settings: Settings
    tokens: dict[str, str] = field(default_factory=dict)
    ids: dict[str, int] = field(default_factory=dict)

    def client(self, who: str | None = None, listen: str = "127.0.0.1") -> TestClient:
        """A browser: signed in as `who` (anonymous for None)."""
        c = TestClient(create_app(self.settings, self.db, listen), follow_redirects=False)
        if who is not None:
            r = c.post("/login", data={"token": self.tokens[who], "next": "/"})
            assert r.status_code == 303, r.text
        return c


def spec(owner: str, **more: object) -> JobSpec:
    fields: dict[str, object] = {"team": "ml", "grace_s": 5.0, **more}
    return JobSpec(command=["python", "train.py"], cwd="/tmp", env={"SECRET": "s3"},
                   owner=owner, **fields).validate()  # type: ignore[arg-type]


@pytest.fixture(params=["sqlite", "postgresql"])
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    pg = request.param == "postgresql"
    settings = Settings(home=str(tmp_path), host="web-test",
                        database_url=request.getfixturevalue("pg_url") if pg else "")
    db = Database(settings.db_url)
    db.upgrade()
    s = Site(db, settings)
    with db.write() as tx:
        admins.add(tx, ADMIN)
        register_host(tx, "tpu-a")
        for who in (OWNER, OTHER, ADMIN):
            s.tokens[who] = webtokens.issue(tx, who, "test")[1]
        s.ids["queued"] = jobs.submit(tx, spec(OWNER), actor=OWNER)
        s.ids["ended"] = jobs.submit(tx, spec(OWNER), actor=OWNER)
        jobs.cancel(tx, s.ids["ended"], OWNER)
    try:
        yield s
    finally:
        db.dispose()
