"""No SQL a user can send changes what the access layer decides.

Alice logs in with the role `tpuq user add` made for her and shadows every object the
access layer names (temporary tables, views and functions of the same names, her own
`search_path` with the temporary schema first), then tries each write and read that
row-level security forbids: none succeeds. The database starts as PostgreSQL before 15
made it, with `PUBLIC` allowed to `CREATE` in `public`: the migrations take that away.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from sqlalchemy import text

from tests.services import create_pg_database, drop_pg_database
from tests.state.test_row_security import dsn, submit_as
from tpuq.spec import JobSpec
from tpuq.state import jobs, roles
from tpuq.state.db import Database

# every relation and function the access layer's functions, policies and views name
RELATIONS = ("admins", "jobs", "job_events", "allocations", "attempts", "hosts", "teams",
             "team_members", "meta", "job_deps", "gang_workers", "notifications",
             "job_functions", "job_env", "pg_class", "pg_roles", "pg_auth_members")
FUNCTIONS = ("tpuq_is_admin", "tpuq_is_agent", "pg_has_role", "to_jsonb", "current_user")


@pytest.fixture
def pre15(pg_url: str) -> Iterator[tuple[Database, str, str, str]]:
    """A database whose `public` schema anyone may create in (PostgreSQL < 15's default),
    migrated, with login roles for alice and bob; alice may make temporary tables, which
    the deployment's database refuses its users unless an operator gives them back."""
    with psycopg.connect(pg_url.replace("postgresql+psycopg", "postgresql"),
                         autocommit=True) as c:
        c.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
    db = Database(pg_url)
    db.upgrade()
    alice, bob = (f"{n}_{secrets.token_hex(3)}" for n in ("alice", "bob"))
    with db.write() as s:
        for name in (alice, bob):
            roles.create_login(s, name)
        s.execute(text(f'GRANT TEMPORARY ON DATABASE "{pg_url.rsplit("/", 1)[1]}" TO {alice}'))
    try:
        yield db, pg_url, alice, bob
    finally:
        with db.write() as s:
            for name in (alice, bob):
                roles.drop_login(s, name)
        db.dispose()


@contextmanager
def shadowed(url: str, me: str) -> Iterator[psycopg.Connection]:
    """A session of `me` with temporary tables, a view and functions named as the access
    layer's objects, and its temporary schema first in its `search_path`. The deployment's
    database refuses temporary tables to its users (0012); an operator may give them back,
    as the fixture does for alice."""
    with psycopg.connect(dsn(url, me), autocommit=True) as c:
        for name in RELATIONS:
            c.execute(f"CREATE TEMP TABLE {name} (name text, x int, relowner oid)")
            c.execute(f"INSERT INTO pg_temp.{name} (name) VALUES (%s)", (me,))
        c.execute("CREATE TEMP VIEW jobs_v AS SELECT 1 AS x")
        for fn in FUNCTIONS:
            c.execute(f"CREATE FUNCTION pg_temp.{fn}() RETURNS boolean LANGUAGE sql "
                      "AS 'SELECT true'")
        c.execute("SET search_path = pg_temp, public")
        try:
            yield c
        finally:  # the role is dropped after the test: its session's objects go first
            c.execute("DISCARD TEMP")


def test_temporary_objects_change_nothing_the_access_layer_decides(pre15):
    db, url, alice, bob = pre15
    his = submit_as(db, bob, WANDB_API_KEY="bobs-key")
    with db.write() as s:
        ended = jobs.submit(s, JobSpec(command=["/bin/true"], cwd="/tmp", owner=alice,
                                       team="default"))
        jobs.cancel(s, ended, alice)
        s.execute(text("INSERT INTO job_functions (job_id, payload, result) "
                       "VALUES (:j, 'c', 'bobs-result')"), {"j": his})
    with shadowed(url, alice) as c:
        env = c.execute("SELECT env FROM public.job_env WHERE id = %s", (his,)).fetchone()
        assert env == ({"WANDB_API_KEY": "(hidden)"},), "bob's secret stays bob's"
        assert c.execute("SELECT count(*) FROM public.job_functions").fetchone() == (0,)
        cur = c.execute("UPDATE public.jobs SET state = 'cancelled' WHERE id = %s", (his,))
        assert cur.rowcount == 0, "bob's job is not hers to cancel"
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("INSERT INTO public.admins VALUES (%s)", (alice,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="from cancelled to queued"):
            c.execute("UPDATE public.jobs SET state = 'queued' WHERE id = %s", (ended,))
        assert c.execute("UPDATE public.hosts SET draining = true").rowcount == 0
        assert c.execute("DELETE FROM public.teams").rowcount == 0
        assert c.execute("SELECT public.tpuq_is_admin(), public.tpuq_is_agent()").fetchone() \
            == (False, False)
    with db.read() as s:
        assert s.scalar(text("SELECT state FROM jobs WHERE id = :i"), {"i": his}) == "queued"
        assert s.scalar(text("SELECT state FROM jobs WHERE id = :i"), {"i": ended}) == "cancelled"
        assert s.scalar(text("SELECT count(*) FROM admins")) == 0


@pytest.mark.parametrize("ddl", [
    "CREATE TABLE public.admins2 (name text)",
    "CREATE VIEW public.v AS SELECT 1",
    "CREATE FUNCTION public.tpuq_is_admin2() RETURNS boolean LANGUAGE sql AS 'SELECT true'",
    "CREATE OPERATOR public.= (LEFTARG = name, RIGHTARG = name, FUNCTION = pg_catalog.nameeq)",
])
def test_a_user_creates_nothing_in_the_deployments_schema(pre15, ddl):
    db, url, alice, _ = pre15
    with psycopg.connect(dsn(url, alice), autocommit=True) as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="schema public"):
            c.execute(ddl)


def test_a_user_makes_no_temporary_tables_unless_an_operator_allows_it(pre15):
    db, url, _, bob = pre15
    with psycopg.connect(dsn(url, bob), autocommit=True) as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="temporary tables"):
            c.execute("CREATE TEMP TABLE admins (name text)")


def test_a_users_own_updates_still_pass_the_guard(pre15):
    """Fixing the guard's name lookups keeps what a user may do: `tpuq update` of a job
    that has not started, and an array's id set at its submission."""
    db, url, alice, _ = pre15
    hers = submit_as(db, alice)
    with shadowed(url, alice) as c:
        cur = c.execute("UPDATE public.jobs SET priority = 5, time_limit_s = 60, array_id = id "
                        "WHERE id = %s", (hers,))
        assert cur.rowcount == 1
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="priority and time limit"):
            c.execute("UPDATE public.jobs SET array_id = array_id + 1 WHERE id = %s", (hers,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="priority and time limit"):
            c.execute("UPDATE public.jobs SET stop_request = 'cancel' WHERE id = %s", (hers,))


def test_a_role_made_for_one_deployment_cannot_connect_to_another(pre15):
    db, url, alice, _ = pre15
    other_url = create_pg_database()
    other = Database(other_url)
    try:
        other.upgrade()
        with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
            psycopg.connect(dsn(other_url, alice)).close()
        with other.write() as s:
            roles.grant_connect(s, alice)
        psycopg.connect(dsn(other_url, alice)).close()
        with other.write() as s:
            roles.revoke_connect(s, alice)
    finally:
        other.dispose()
        drop_pg_database(other_url)
