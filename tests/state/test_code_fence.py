"""Code older than the schema never acts on it (migrations/versions/0015, state/versions.py).

The releases made before the fence have no check of their own: the database refuses the
writes by which they would lead, assign and start, as they make them (the statements
below are theirs: leader.acquire of the `scheduler` row, an attempt row and a start that
do not name their code). Code from the fence on reads the schema's minimum and stops.
"""

from __future__ import annotations

import pytest
from sqlalchemy import insert, select, text, update
from sqlalchemy.exc import IntegrityError

from tests.state.rows import register_host
from tpuq.scheduler.passes import ROLE
from tpuq.spec import JobSpec
from tpuq.state import attempts, hosts, jobs, leader
from tpuq.state.db import SCHEMA_HEAD, Database, SchemaError
from tpuq.state.models import Attempt, Leader
from tpuq.state.versions import Schema

REFUSED = "older than the database schema"


def new_job(db: Database) -> int:
    with db.write() as s:
        return jobs.submit(s, JobSpec(command=["/bin/true"], cwd="/", owner="u", team="t"))


def test_an_old_release_cannot_take_the_leadership_and_takes_the_refusal_quietly(db):
    with db.write() as s:
        assert leader.acquire(s, "scheduler", "old-agent", 5.0) is False
    with db.write() as s:
        assert leader.acquire(s, ROLE, "new-agent", 5.0) is True
        assert s.scalars(select(Leader.role)).all() == [ROLE]


def test_an_old_release_renewing_the_lease_it_held_before_the_migration_is_refused(db):
    with db.write() as s, pytest.raises(IntegrityError, match=REFUSED):
        s.execute(text("INSERT INTO leaders (role, holder, expires_at) "
                       "VALUES ('scheduler', 'old', 0)"))
    with db.write() as s:  # today's role, written the same way, is not
        s.execute(insert(Leader).values(role=ROLE, holder="new", expires_at=0.0))
        s.execute(update(Leader).values(holder="new2"))


def test_an_attempt_row_that_does_not_name_its_code_is_refused(db):
    job = new_job(db)
    with db.write() as s, pytest.raises(IntegrityError, match=REFUSED):
        s.execute(insert(Attempt).values(job_id=job, number=1, host="h", chips=[0],
                                         assigned_at=0.0))
    with db.write() as s, pytest.raises(IntegrityError, match=REFUSED):
        s.execute(insert(Attempt).values(job_id=job, number=1, host="h", chips=[0],
                                         assigned_at=0.0, code_revision="0012"))


def test_a_start_that_does_not_name_its_code_is_refused_and_todays_passes(db):
    job = new_job(db)
    with db.write() as s:
        register_host(s, "h")
        assert attempts.assign(s, job, 0, "h", [0], 30.0) == 1
    with db.write() as s, pytest.raises(IntegrityError, match=REFUSED):
        # how every release before the fence starts an attempt (its start rider)
        s.execute(update(Attempt).where(Attempt.job_id == job)
                  .values(boot_id="b", log_path="/l", started_at=1.0, code_revision=None))
    with db.write() as s:
        s.execute(text("UPDATE meta SET value = '0012' WHERE key = 'min_code'"))
        s.execute(update(Attempt).where(Attempt.job_id == job).values(code_revision=None))
        s.execute(text("UPDATE meta SET value = :v WHERE key = 'min_code'"),
                  {"v": SCHEMA_HEAD})
    with db.write() as s:
        assert attempts.start(s, job, 1, "h", boot_id="b", log_path="/l", lease_s=30.0)
        assert s.scalar(select(Attempt.code_revision)) == SCHEMA_HEAD


def test_the_scheduler_gives_no_work_to_a_host_whose_agent_is_older(db):
    from tpuq.settings import Settings
    from tpuq.state import snapshot

    with db.write() as s:
        register_host(s, "new")
        register_host(s, "old")
        s.execute(text("UPDATE hosts SET code_revision = NULL WHERE name = 'old'"))
    with db.read() as s:
        snap = snapshot.read(s, Settings().host_stale_s, 24.0)
        floor = hosts.min_code(s)
    # the oldest code admitted: raised by the migrations older code would act wrongly
    # under, not by each (0021's row versions are the database's own: older code is fine)
    assert floor is not None and floor <= SCHEMA_HEAD
    why = {h[0]: h[3] for h in snap.hosts}  # (name, type, chips, out of service, ...)
    assert why["new"] is None
    assert why["old"] is not None and why["old"].startswith(
        f"agent's tpuq is older than the database (schema before {floor}")


def move_database_past_this_code(db: Database, min_code: str) -> None:
    """As a later release's `tpuq db upgrade` would leave it."""
    with db.write() as s:
        s.execute(text("UPDATE alembic_version SET version_num = '9999'"))
        s.execute(text("UPDATE meta SET value = :v WHERE key = 'min_code'"), {"v": min_code})


def test_a_newer_database_that_admits_this_code_is_used(db):
    move_database_past_this_code(db, SCHEMA_HEAD)
    db.ensure_schema(auto_upgrade=db.is_sqlite)
    assert db.schema() == Schema("9999", SCHEMA_HEAD)


def test_a_newer_database_that_does_not_is_refused_with_what_to_do(db):
    move_database_past_this_code(db, "9999")
    with pytest.raises(SchemaError) as e:
        db.ensure_schema(auto_upgrade=True)  # embedded: never tries to migrate it
    assert f"is at schema 9999, newer than this tpuq (schema {SCHEMA_HEAD}), and needs " \
           "tpuq of schema 9999 or later: upgrade tpuq here" in str(e.value)
    with pytest.raises(SchemaError, match="upgrade tpuq here"):
        db.upgrade()


@pytest.mark.parametrize("schema, code, admits", [
    (Schema("0016", "0016"), "0016", True),
    (Schema("0012"), "0016", True),  # older: needs an upgrade, which is not this question
    (Schema("0017", "0016"), "0016", True),
    (Schema("0017", "0017"), "0016", False),
    (Schema("0017"), "0016", False),  # newer, and says nothing: assume the worst
    (Schema(None), "0016", True),
])
def test_which_code_a_schema_admits(schema, code, admits):
    assert schema.admits(code) is admits
    assert (schema.too_new_for(code, "db") is None) is admits


@pytest.mark.parametrize("revision", ["0002", "0012"])
def test_a_schema_from_before_the_minimum_reads_as_its_revision(revision, tmp_path):
    from tpuq.state import migrate

    db = Database(f"sqlite:///{tmp_path}/old.db")
    migrate.upgrade(db.engine, revision)
    assert db.schema() == Schema(revision, None)
    db.dispose()
