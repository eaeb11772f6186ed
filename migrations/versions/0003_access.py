"""access: admins, the database's instance id, CHECK constraints on job specs, and on
PostgreSQL login roles with row-level security

Revision ID: 0003
Revises: 0002

On PostgreSQL, users off the hosts connect as login roles of their own, members of
`tpuq_user` (`tpuq user add NAME`): they read the queue, insert jobs only as themselves
and change only their own jobs (admins: anyone's), and only as a user may (hold,
release, cancel, preempt); a trigger refuses any other change. The values of a job's
captured environment are readable only through the `job_env` view, which shows them
to the job's owner and admins. Agents log in as members of `tpuq_agent`, which the
policies do not restrict; the tables' owner (who ran the migrations) is an agent too.
A later migration that adds a column a user writes or reads must grant it here too.
"""

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# the job spec's limits (tpuq/spec.py), as the last line of defence
JOB_CHECKS = {
    "ck_jobs_state": "state IN ('queued', 'held', 'assigned', 'running', 'preempting', "
                     "'succeeded', 'failed', 'cancelled', 'timeout')",
    "ck_jobs_priority": "priority BETWEEN -1000000 AND 1000000",
    "ck_jobs_chips": "chips IS NULL OR chips BETWEEN 1 AND 4096",
    "ck_jobs_grace": "grace_s >= 0 AND grace_s <= 604800",
    "ck_jobs_time_limit": "time_limit_s IS NULL OR (time_limit_s > 0 AND time_limit_s <= 31622400)",
    "ck_jobs_retries": "max_retries BETWEEN 0 AND 100",
    "ck_jobs_lengths": "length(owner) BETWEEN 1 AND 64 AND length(team) BETWEEN 1 AND 64 "
                       "AND (name IS NULL OR length(name) <= 200) "
                       "AND (tpu_type IS NULL OR length(tpu_type) <= 32)",
    "ck_jobs_command": "json_array_length(command) > 0",
}

USER_TRANSITIONS = """
    (OLD.state, NEW.state) IN (('queued', 'held'), ('held', 'queued'), ('queued', 'cancelled'),
                               ('held', 'cancelled'), ('assigned', 'cancelled'))
    OR (OLD.state IN ('running', 'preempting') AND NEW.state = 'preempting'
        AND NEW.stop_request IN ('cancel', 'preempt'))
"""
USER_CHANGES = "ARRAY['state', 'stop_request', 'reason', 'updated_at', 'ended_at']"

POSTGRES = f"""
DO $$ BEGIN
  CREATE ROLE tpuq_user NOLOGIN;
EXCEPTION WHEN duplicate_object THEN NULL; END $$;
DO $$ BEGIN
  CREATE ROLE tpuq_agent NOLOGIN;
EXCEPTION WHEN duplicate_object THEN NULL; END $$;

CREATE FUNCTION tpuq_is_admin() RETURNS boolean LANGUAGE sql STABLE AS
  $f$ SELECT EXISTS (SELECT 1 FROM admins WHERE name = current_user) $f$;
-- agents: members of tpuq_agent, and whoever owns the tables (who ran the migrations)
CREATE FUNCTION tpuq_is_agent() RETURNS boolean LANGUAGE sql STABLE AS
  $f$ SELECT pg_has_role(current_user, 'tpuq_agent', 'MEMBER')
          OR pg_has_role(current_user, (SELECT relowner FROM pg_class
                                        WHERE oid = 'jobs'::regclass), 'MEMBER') $f$;

GRANT USAGE ON SCHEMA public TO tpuq_user, tpuq_agent;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO tpuq_agent;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO tpuq_agent, tpuq_user;
GRANT SELECT ON attempts, job_events, hosts, allocations, teams, team_members, admins, meta,
                alembic_version TO tpuq_user;
GRANT SELECT (id, name, state, command, cwd, owner, team, priority, chips, tpu_type,
              stop_signal, grace_s, time_limit_s, max_retries, failures, preemptions,
              requeue_on_preempt, tcmalloc, attempt, host, lease_expires_at, stop_request,
              not_before, resubmit_of, submitted_at, updated_at, ended_at, exit_code,
              exit_signal, reason) ON jobs TO tpuq_user;
GRANT INSERT (name, state, command, cwd, env, owner, team, priority, chips, tpu_type,
              stop_signal, grace_s, time_limit_s, max_retries, failures, preemptions,
              requeue_on_preempt, tcmalloc, attempt, resubmit_of, submitted_at, updated_at)
      ON jobs TO tpuq_user;
GRANT UPDATE (state, stop_request, reason, updated_at, ended_at) ON jobs TO tpuq_user;
GRANT INSERT ON job_events TO tpuq_user;
GRANT DELETE ON allocations TO tpuq_user;
GRANT UPDATE (draining) ON hosts TO tpuq_user;
GRANT INSERT, UPDATE, DELETE ON teams, team_members, admins TO tpuq_user;

CREATE VIEW job_env AS
  SELECT id, CASE WHEN owner = current_user OR tpuq_is_admin() OR tpuq_is_agent() THEN env
                  ELSE (SELECT coalesce(json_object_agg(k, '(hidden)'), '{{}}'::json)
                        FROM json_object_keys(env) AS k) END AS env
  FROM jobs;
GRANT SELECT ON job_env TO tpuq_user, tpuq_agent;

ALTER TABLE jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY agents ON jobs TO tpuq_agent USING (true) WITH CHECK (true);
CREATE POLICY everyone_reads ON jobs FOR SELECT TO tpuq_user USING (true);
CREATE POLICY submit_as_oneself ON jobs FOR INSERT TO tpuq_user WITH CHECK (
  owner = current_user AND state IN ('queued', 'held') AND attempt = 0 AND failures = 0
  AND preemptions = 0);
CREATE POLICY change_own ON jobs FOR UPDATE TO tpuq_user
  USING (owner = current_user OR tpuq_is_admin())
  WITH CHECK (owner = current_user OR tpuq_is_admin());

CREATE FUNCTION tpuq_guard_job_change() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  IF tpuq_is_agent() THEN
    RETURN NEW;
  END IF;
  IF (to_jsonb(NEW) - {USER_CHANGES}) IS DISTINCT FROM (to_jsonb(OLD) - {USER_CHANGES}) THEN
    RAISE EXCEPTION 'tpuq: a user may change only a job''s state, stop request and reason'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF NOT ({USER_TRANSITIONS}) THEN
    RAISE EXCEPTION 'tpuq: a user may not move a job from % to %', OLD.state, NEW.state
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NEW;
END $f$;
CREATE TRIGGER guard_job_change BEFORE UPDATE ON jobs
  FOR EACH ROW EXECUTE FUNCTION tpuq_guard_job_change();

ALTER TABLE job_events ENABLE ROW LEVEL SECURITY;
CREATE POLICY agents ON job_events TO tpuq_agent USING (true) WITH CHECK (true);
CREATE POLICY everyone_reads ON job_events FOR SELECT TO tpuq_user USING (true);
CREATE POLICY own_events ON job_events FOR INSERT TO tpuq_user WITH CHECK (
  actor = current_user AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = job_id
                                   AND (j.owner = current_user OR tpuq_is_admin())));

ALTER TABLE allocations ENABLE ROW LEVEL SECURITY;
CREATE POLICY agents ON allocations TO tpuq_agent USING (true) WITH CHECK (true);
CREATE POLICY everyone_reads ON allocations FOR SELECT TO tpuq_user USING (true);
CREATE POLICY free_cancelled ON allocations FOR DELETE TO tpuq_user USING (
  EXISTS (SELECT 1 FROM jobs j WHERE j.id = job_id AND j.state = 'cancelled'
          AND (j.owner = current_user OR tpuq_is_admin())));

ALTER TABLE attempts ENABLE ROW LEVEL SECURITY;
CREATE POLICY agents ON attempts TO tpuq_agent USING (true) WITH CHECK (true);
CREATE POLICY everyone_reads ON attempts FOR SELECT TO tpuq_user USING (true);
"""

ADMIN_ONLY = ("hosts", "teams", "team_members", "admins")


def upgrade() -> None:
    op.create_table("admins", sa.Column("name", sa.String(64), primary_key=True))
    meta = op.create_table("meta", sa.Column("key", sa.String(32), primary_key=True),
                           sa.Column("value", sa.Text, nullable=False))
    op.bulk_insert(meta, [{"key": "instance", "value": uuid.uuid4().hex}])
    with op.batch_alter_table("jobs") as batch:
        for name, condition in JOB_CHECKS.items():
            batch.create_check_constraint(name, condition)
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(POSTGRES)
    for table in ADMIN_ONLY:
        op.execute(f"""
            ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;
            CREATE POLICY agents ON {table} TO tpuq_agent USING (true) WITH CHECK (true);
            CREATE POLICY everyone_reads ON {table} FOR SELECT TO tpuq_user USING (true);
            CREATE POLICY admins_write ON {table} FOR ALL TO tpuq_user
              USING (tpuq_is_admin()) WITH CHECK (tpuq_is_admin());
        """)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in (*ADMIN_ONLY, "jobs", "job_events", "allocations", "attempts"):
            op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
            for policy in ("agents", "everyone_reads", "admins_write", "submit_as_oneself",
                           "change_own", "own_events", "free_cancelled"):
                op.execute(f"DROP POLICY IF EXISTS {policy} ON {table}")
        op.execute("DROP TRIGGER guard_job_change ON jobs")
        op.execute("DROP VIEW job_env")
        for fn in ("tpuq_guard_job_change", "tpuq_is_admin", "tpuq_is_agent"):
            op.execute(f"DROP FUNCTION {fn}()")
    with op.batch_alter_table("jobs") as batch:
        for name in JOB_CHECKS:
            batch.drop_constraint(name, type_="check")
    op.drop_table("meta")
    op.drop_table("admins")


def downgrade_loses(bind: sa.Connection) -> list[str]:
    # without it the database has no admins and its instance id is made anew (every
    # job's files would look like another database's), and PostgreSQL no access rules
    return ["the access rules, the admins and the database's instance id"]
