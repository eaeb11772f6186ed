"""Every migration, up and down, on a database full of rows of every earlier schema.

One database walks the chain from the first revision to the head. At each revision it
gets rows in every table and column (tests/state/schema_rows.py, made from the schema
itself); the next migration runs over them, then its downgrade (over rows in what it
added), then the migration again. Every row written is read back after each step. At
the head, today's code reads every old job as `status`, `show` and `history` do.
"""

from __future__ import annotations

import base64
import pickle

import pytest

from tests.state.schema_rows import Rows
from tpuq.api.caller import Caller
from tpuq.api.handlers import Api
from tpuq.protocol import History, JobDetail, JobList, ListJobs, ReadResult, ResultChunk, ShowJob
from tpuq.protocol import Rows as RowsReply
from tpuq.settings import Settings
from tpuq.state import migrate
from tpuq.state.db import SCHEMA_HEAD, Database


def chain() -> list[str]:
    return [r.revision for r in reversed(list(migrate.script().walk_revisions()))]


@pytest.fixture(params=["sqlite", "postgresql"])
def empty(request, tmp_path):
    url = (f"sqlite:///{tmp_path}/t.db" if request.param == "sqlite"
           else request.getfixturevalue("pg_url"))
    d = Database(url)
    yield d
    d.dispose()


def test_every_migration_keeps_every_row_up_and_down(empty):
    revisions = chain()
    assert revisions[-1] == SCHEMA_HEAD
    rows = Rows()
    engine = empty.engine
    for before, rev in zip([None, *revisions], revisions):
        migrate.upgrade(engine, rev)
        with engine.begin() as c:
            rows.check(c)
            rows.fill(c)
        if before is None:
            continue
        with engine.connect() as c:  # what `tpuq db downgrade` asks first, over rows
            loses, drops = migrate.downgrade_costs(c, rev, before)
            assert all(isinstance(w, str) for w in [*loses, *drops])
        migrate.downgrade(engine, before)
        with engine.begin() as c:
            rows.forget_what_is_gone(c)
            rows.check(c)
        migrate.upgrade(engine, rev)
        with engine.begin() as c:
            rows.check(c)
            rows.fill(c)  # what the downgrade took, for the next migration to carry
    with engine.begin() as c:
        assert rows.uncovered(c) == []
        assert rows.check(c) > 300
    read_everything(empty, rows)


def read_everything(db: Database, rows: Rows) -> None:
    """What `tpuq status --all`, `show`, `history` and a function's result read."""
    api = Api(Settings(), db, here="nowhere", reasons=lambda: {})
    admin = Caller("root", admin=True)
    listed = api.handle(ListJobs(everything=True), admin)
    assert isinstance(listed, JobList), listed
    job_ids = set(rows.ids("jobs"))
    assert {j["id"] for j in listed.jobs} == job_ids
    for job_id in job_ids:
        shown = api.handle(ShowJob(id=job_id), admin)
        assert isinstance(shown, JobDetail), shown
        assert shown.job["id"] == job_id
    ended = api.handle(History(), admin)
    assert isinstance(ended, RowsReply), ended
    for job_id in rows.ids("job_functions"):
        chunk = api.handle(ReadResult(id=job_id), admin)
        assert isinstance(chunk, ResultChunk), chunk
        assert pickle.loads(base64.b64decode(chunk.data))[0] == "ok"


def test_every_migration_says_what_its_downgrade_would_lose():
    for rev in migrate.script().walk_revisions():
        assert callable(getattr(rev.module, "downgrade_loses", None)), \
            f"migration {rev.revision} has no downgrade_loses(bind) (tpuq db downgrade asks it)"
