"""PostgreSQL enforces who may do what for users off the hosts: alice, connected as her
own login role with plain SQL, reads the queue but not bob's secrets, submits only as
herself, and changes nothing of bob's; the CLI on her laptop says so in one line."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import text

from tests.harness import TPUQ
from tpuq.spec import JobSpec
from tpuq.state import admins, jobs, roles
from tpuq.state.db import Database


@pytest.fixture
def pg(pg_url: str) -> Iterator[tuple[Database, str, str, str]]:
    """A migrated database, and login roles for alice and bob (cluster-wide: dropped after)."""
    db = Database(pg_url)
    db.upgrade()
    alice, bob = (f"{n}_{secrets.token_hex(3)}" for n in ("alice", "bob"))
    with db.write() as s:
        for name in (alice, bob):
            roles.create_login(s, name)
    try:
        yield db, pg_url, alice, bob
    finally:
        with db.write() as s:
            for name in (alice, bob):
                roles.drop_login(s, name)
        db.dispose()


def dsn(url: str, role: str) -> str:
    return url.replace("postgresql+psycopg://postgres@", f"postgresql://{role}@", 1)


def submit_as(db: Database, owner: str, **env: str) -> int:
    with db.write() as s:
        return jobs.submit(s, JobSpec(command=["/bin/true"], cwd="/tmp", owner=owner,
                                      team="default", env=env))


def test_a_login_role_reads_the_queue_and_changes_only_its_own_jobs(pg):
    db, url, alice, bob = pg
    hers, his = submit_as(db, alice, SECRET="a"), submit_as(db, bob, SECRET="b")
    with psycopg.connect(dsn(url, alice), autocommit=True) as c:
        owners = dict(c.execute("SELECT id, owner FROM jobs").fetchall())
        assert owners == {hers: alice, his: bob}, "everyone sees the queue"
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT env FROM jobs")
        envs = dict(c.execute("SELECT id, env FROM job_env").fetchall())
        assert envs == {hers: {"SECRET": "a"}, his: {"SECRET": "(hidden)"}}
        cur = c.execute("UPDATE jobs SET state = 'cancelled' WHERE id = %s", (his,))
        assert cur.rowcount == 0, "bob's row is not hers to change"
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("UPDATE jobs SET max_retries = 99 WHERE id = %s", (hers,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="from queued to running"):
            c.execute("UPDATE jobs SET state = 'running' WHERE id = %s", (hers,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            c.execute("INSERT INTO jobs (command, cwd, env, owner, team, priority, state, "
                      "stop_signal, grace_s, max_retries, failures, preemptions, attempt, "
                      "requeue_on_preempt, tcmalloc, submitted_at, updated_at) VALUES "
                      "('[\"x\"]', '/', '{}', %s, 't', 0, 'queued', 'SIGTERM', 1, 0, 0, 0, 0,"
                      " true, true, 0, 0)", (bob,))
        assert c.execute("UPDATE hosts SET draining = true").rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("INSERT INTO admins VALUES (%s)", (alice,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("DELETE FROM leaders")
        assert c.execute("UPDATE jobs SET state = 'held' WHERE id = %s", (hers,)).rowcount == 1
    with db.read() as s:
        states = dict(s.execute(text("SELECT id, state FROM jobs")).all())
    assert states == {hers: "held", his: "queued"}


def test_a_users_change_moves_the_rows_version_which_is_not_theirs_to_write(pg):
    """The version trigger runs after the guard (name order), so a change a user may make
    passes the guard and still moves the version the scheduler rereads rows by."""
    db, url, alice, _ = pg
    hers = submit_as(db, alice)
    with psycopg.connect(dsn(url, alice), autocommit=True) as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("UPDATE jobs SET row_version = 0 WHERE id = %s", (hers,))
        assert c.execute("UPDATE jobs SET priority = 5 WHERE id = %s", (hers,)).rowcount == 1
        assert c.execute("SELECT row_version FROM jobs WHERE id = %s", (hers,)).fetchone() \
            == (1,), "users read it (every column but the secret ones)"


def test_tpuq_from_a_laptop_acts_as_the_database_says(pg, tmp_path):
    """No agent on this machine: the CLI writes the database directly, as alice's role."""
    db, url, alice, bob = pg
    his = submit_as(db, bob, WANDB_API_KEY="bobs-key")
    env = {"TPUQ_HOME": str(tmp_path / "laptop"), "TPUQ_DATABASE_URL": dsn(url, alice),
           "TPUQ_BROKER_URL": "redis://127.0.0.1:1/0", "TPUQ_USER": bob, "PATH": "/usr/bin:/bin",
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}

    def tpuq(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*TPUQ, *args], env=env, capture_output=True, text=True,
                              timeout=60, cwd=tmp_path)

    r = tpuq("submit", "-q", "--hold", "--", "/bin/true")
    assert r.returncode == 0, r.stderr
    with db.read() as s:
        owner = s.scalar(text("SELECT owner FROM jobs WHERE id = :i"), {"i": int(r.stdout)})
    assert owner == alice, "the owner is the database session's, not TPUQ_USER"
    r = tpuq("cancel", str(his))
    assert r.returncode == 4 and f"is {bob}'s job" in r.stderr
    shown = json.loads(tpuq("show", str(his), "--json").stdout)
    assert shown["env"] == {"WANDB_API_KEY": "(hidden)"}
    r = tpuq("logs", str(his))
    assert r.returncode == 4 and "only its owner or an admin" in r.stderr
    r = tpuq("quota", "set", "default", "--max-chips", "1")
    assert r.returncode == 4 and "only admins may change quotas" in r.stderr
    assert "Traceback" not in r.stderr
    assert tpuq("whoami").stdout.strip() == alice


def test_notifications_are_written_with_a_users_own_change_and_their_urls_are_agents_only(
        pg, tmp_path):
    """Alice's cancel writes its outbox row under her role; nobody but an agent reads
    where a job tells its owner (a webhook's token), and nobody queues a message about
    someone else's job."""
    db, url, alice, bob = pg
    with db.write() as s:
        his = jobs.submit(s, JobSpec(command=["/bin/true"], cwd="/tmp", owner=bob,
                                     team="default", notify="end",
                                     notify_to="slack://Tok/En/Secret"))
    env = {"TPUQ_HOME": str(tmp_path / "laptop"), "TPUQ_DATABASE_URL": dsn(url, alice),
           "TPUQ_BROKER_URL": "redis://127.0.0.1:1/0", "PATH": "/usr/bin:/bin",
           "TPUQ_NOTIFY_ALLOW": "127.0.0.1",  # the destination below (never sent to)
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}

    def tpuq(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*TPUQ, *args], env=env, capture_output=True, text=True,
                              timeout=60, cwd=tmp_path)

    r = tpuq("submit", "-q", "--hold", "--notify", "end", "--notify-to",
             "json://127.0.0.1:9/hook", "--", "/bin/true")
    assert r.returncode == 0, r.stderr
    hers = int(r.stdout)
    r = tpuq("cancel", str(hers))
    assert r.returncode == 0, r.stderr
    shown = json.loads(tpuq("show", str(hers), "--json").stdout)
    assert shown["notify"] == "end" and "notify_to" not in shown
    assert [(n["event"], n["state"]) for n in shown["notifications"]] == [("cancelled", "pending")]
    with psycopg.connect(dsn(url, alice), autocommit=True) as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT notify_to FROM jobs")
    with psycopg.connect(dsn(url, alice), autocommit=True) as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            c.execute("INSERT INTO notifications (job_id, event, created_at, state, next_at) "
                      "VALUES (%s, 'failed', 0, 'pending', 0)", (his,))
    with db.read() as s:
        assert s.scalar(text("SELECT notify_to FROM jobs WHERE id = :i"), {"i": hers}) \
            == "json://127.0.0.1:9/hook"


def test_only_admins_declare_the_fleet_and_everyone_reads_it(pg):
    db, url, alice, bob = pg
    with db.write() as s:
        admins.add(s, alice)
    insert = ("INSERT INTO fleet_slots (name, spec, applied_at) "
              "VALUES ('v4', '{}'::json, 0)")
    with psycopg.connect(dsn(url, bob), autocommit=True) as c:
        with pytest.raises(psycopg.Error, match="row-level security"):
            c.execute(insert)
        with pytest.raises(psycopg.Error, match="permission denied"):
            c.execute("UPDATE fleet_members SET tries = 0")  # the controller's alone
    with psycopg.connect(dsn(url, alice), autocommit=True) as c:
        c.execute(insert)
    with psycopg.connect(dsn(url, bob), autocommit=True) as c:
        assert c.execute("SELECT name FROM fleet_slots").fetchall() == [("v4",)]
        assert c.execute("SELECT count(*) FROM fleet_members").fetchone() == (0,)
