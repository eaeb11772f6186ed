"""access, round two: the access layer resolves names the same way in every session,
and a deployment's login roles reach only its own database

Revision ID: 0012
Revises: 0011

PostgreSQL looks names up through the caller's `search_path`, whose first entry, unless
named elsewhere, is the session's own temporary schema. A function whose body is a string
is parsed when it runs, so a user who made a temporary table `admins` (or `jobs`) could
make `tpuq_is_admin()` (or `tpuq_is_agent()`) answer yes. Every function of the access
layer is therefore made again with a fixed `search_path` (`pg_catalog`, the deployment's
schema, `pg_temp` last) and schema-qualified names; policies, views and column grants are
stored parsed and need no change. A temporary schema is never searched for functions or
operators, and no user may create anything in the deployment's schema (before PostgreSQL
15 `PUBLIC` may `CREATE` in `public` by default: revoked here).

Login roles belong to the whole server, not to one database: `CONNECT` and `TEMPORARY`
on this database are taken from `PUBLIC`, and `CONNECT` is given to each role `tpuq user
add` makes for it. Roles that were members of the groups before this migration keep
their access here (they could
connect before) when they left a trace in this database (see `_roles_of_this_deployment`);
`tpuq user grant NAME` lets another in, `tpuq user revoke NAME` takes it away.
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# mirrors 0003's USER_TRANSITIONS / USER_CHANGES, which it replaces
USER_TRANSITIONS = """
    (OLD.state, NEW.state) IN (('queued', 'held'), ('held', 'queued'), ('queued', 'cancelled'),
                               ('held', 'cancelled'), ('assigned', 'cancelled'))
    OR (OLD.state IN ('running', 'preempting') AND NEW.state = 'preempting'
        AND NEW.stop_request IN ('cancel', 'preempt'))
"""
USER_CHANGES = "ARRAY['state', 'stop_request', 'reason', 'updated_at', 'ended_at']"
# what stays of a state a user may change: `tpuq update` (0007 grants the columns) and
# an array's id, which its submission sets on every task once they are inserted (0006)
SAME_STATE_CHANGES = "ARRAY['priority', 'time_limit_s', 'updated_at', 'array_id']"


def functions(schema: str) -> str:
    path = f"SET search_path = pg_catalog, {schema}, pg_temp"
    return f"""
CREATE OR REPLACE FUNCTION {schema}.tpuq_is_admin() RETURNS boolean LANGUAGE sql STABLE
  {path} AS
  $f$ SELECT EXISTS (SELECT 1 FROM {schema}.admins
                     WHERE name OPERATOR(pg_catalog.=) CURRENT_USER) $f$;

CREATE OR REPLACE FUNCTION {schema}.tpuq_is_agent() RETURNS boolean LANGUAGE sql STABLE
  {path} AS
  $f$ SELECT pg_catalog.pg_has_role(CURRENT_USER, 'tpuq_agent', 'MEMBER')
          OR pg_catalog.pg_has_role(CURRENT_USER,
               (SELECT c.relowner FROM pg_catalog.pg_class c
                WHERE c.oid OPERATOR(pg_catalog.=) '{schema}.jobs'::pg_catalog.regclass),
               'MEMBER') $f$;
"""


def guard(schema: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION {schema}.tpuq_guard_job_change() RETURNS trigger LANGUAGE plpgsql
  SET search_path = pg_catalog, {schema}, pg_temp AS $f$
BEGIN
  IF {schema}.tpuq_is_agent() THEN
    RETURN NEW;
  END IF;
  IF NEW.state OPERATOR(pg_catalog.=) OLD.state AND OLD.state IN ('queued', 'held') THEN
    -- tpuq update (priority, time limit) and an array's id, set once at its submission
    IF (pg_catalog.to_jsonb(NEW) OPERATOR(pg_catalog.-) {SAME_STATE_CHANGES})
       IS DISTINCT FROM (pg_catalog.to_jsonb(OLD) OPERATOR(pg_catalog.-) {SAME_STATE_CHANGES})
       OR (OLD.array_id IS NOT NULL AND NEW.array_id IS DISTINCT FROM OLD.array_id) THEN
      RAISE EXCEPTION 'tpuq: a user may change only the priority and time limit of a job that has not started'
        USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
  END IF;
  IF (pg_catalog.to_jsonb(NEW) OPERATOR(pg_catalog.-) {USER_CHANGES})
     IS DISTINCT FROM (pg_catalog.to_jsonb(OLD) OPERATOR(pg_catalog.-) {USER_CHANGES}) THEN
    RAISE EXCEPTION 'tpuq: a user may change only a job''s state, stop request and reason'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF NOT ({USER_TRANSITIONS}) THEN
    RAISE EXCEPTION 'tpuq: a user may not move a job from % to %', OLD.state, NEW.state
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NEW;
END $f$;
"""


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    quote = bind.dialect.identifier_preparer.quote
    schema = quote(bind.scalar(sa.text("SELECT current_schema()")))
    database = quote(bind.scalar(sa.text("SELECT current_database()")))
    op.execute(functions(schema))
    op.execute(guard(schema))
    op.execute(f"REVOKE CREATE ON SCHEMA {schema} FROM PUBLIC")
    op.execute(f"REVOKE ALL ON DATABASE {database} FROM PUBLIC")
    for name in _roles_of_this_deployment(bind):
        op.execute(f"GRANT CONNECT ON DATABASE {database} TO {quote(name)}")


def _roles_of_this_deployment(bind: sa.Connection) -> list[str]:
    """Login roles that keep their access here: every agent's (a deployment's agents must
    not lose it mid-upgrade), and each user's role that left a trace in this database (an
    admin, a job's owner, an event's actor). A role made for another deployment on the
    same server has none; one made here but never used is let in again with `tpuq user
    grant`."""
    return list(bind.scalars(sa.text("""
        SELECT r.rolname FROM pg_roles r
        JOIN pg_auth_members m ON m.member = r.oid JOIN pg_roles g ON g.oid = m.roleid
        WHERE r.rolcanlogin AND (g.rolname = 'tpuq_agent' OR (g.rolname = 'tpuq_user' AND (
              r.rolname IN (SELECT name FROM admins)
              OR r.rolname IN (SELECT owner FROM jobs)
              OR r.rolname IN (SELECT actor FROM job_events))))
        GROUP BY r.rolname""")).all())


def downgrade() -> None:
    # The functions stay as they are (they decide the same, only safely); the database
    # is opened to every role again, as before.
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    database = bind.dialect.identifier_preparer.quote(
        bind.scalar(sa.text("SELECT current_database()")))
    op.execute(f"GRANT CONNECT, TEMPORARY ON DATABASE {database} TO PUBLIC")


def downgrade_loses(bind: sa.Connection) -> list[str]:
    return []  # the database is opened to every role again; nothing stored is lost
