"""code fence: code older than the schema never leads, assigns or starts jobs

Revision ID: 0015
Revises: 0014

The database records the oldest code that may act on it: `meta.min_code`, a schema
revision; code whose newest migration is older stops leading, assigning and starting
jobs (tpuq/state/versions.py), and so would every later release. Releases made before
this migration have no such check, so the database refuses what they would do:

- leadership: they lead as the `leaders` row `scheduler`, which triggers now refuse
  (as an integrity error, which their `leader.acquire` takes for "another agent leads");
  agents from this revision on lead as `scheduler/2`;
- assigning: every attempt row names the code that wrote it (`attempts.code_revision`);
  one inserted without it, or older than `min_code`, is refused;
- starting: an attempt's start (`started_at`) is refused unless the same statement names
  code of `min_code` or later.

Their keepers and lease renewals are untouched, so jobs they run go on until a new agent
adopts them (SIGUSR2 hand-over). `hosts.code_revision` is the code of the host's agent:
the scheduler gives no work to a host whose agent is older than `min_code`, and `tpuq
status` says why. On SQLite a table rebuilt by a later batch migration loses its
triggers: a migration that rebuilds `attempts` or `leaders` must create them again
(tests/state/test_code_fence.py checks them at the head).
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

OLD_ROLE = "scheduler"  # the leaders row of every release before this revision
REFUSAL = ("tpuq: this code is older than the database schema and may not lead, assign or "
           "start jobs: upgrade tpuq on this host and hand its agent over (kill -USR2)")
TOO_OLD = "NEW.code_revision IS NULL OR NEW.code_revision < (SELECT value FROM {meta} " \
          "WHERE key = 'min_code')"

SQLITE = [
    f"""CREATE TRIGGER fence_old_leader_insert BEFORE INSERT ON leaders
        WHEN NEW.role = '{OLD_ROLE}' BEGIN SELECT RAISE(ABORT, '{REFUSAL}'); END""",
    f"""CREATE TRIGGER fence_old_leader_update BEFORE UPDATE ON leaders
        WHEN NEW.role = '{OLD_ROLE}' BEGIN SELECT RAISE(ABORT, '{REFUSAL}'); END""",
    f"""CREATE TRIGGER fence_old_assign BEFORE INSERT ON attempts
        WHEN {TOO_OLD.format(meta='meta')} BEGIN SELECT RAISE(ABORT, '{REFUSAL}'); END""",
    f"""CREATE TRIGGER fence_old_start BEFORE UPDATE OF started_at ON attempts
        WHEN {TOO_OLD.format(meta='meta')} BEGIN SELECT RAISE(ABORT, '{REFUSAL}'); END""",
]
SQLITE_TRIGGERS = ("fence_old_leader_insert", "fence_old_leader_update", "fence_old_assign",
                   "fence_old_start")


def postgres(schema: str) -> str:
    # an integrity error (class 23), as SQLite's RAISE(ABORT) is: old code that takes the
    # leadership catches it and goes on as a follower
    return f"""
CREATE OR REPLACE FUNCTION {schema}.tpuq_fence_old_code() RETURNS trigger LANGUAGE plpgsql
  SET search_path = pg_catalog, {schema}, pg_temp AS $f$
BEGIN
  IF TG_TABLE_NAME OPERATOR(pg_catalog.=) 'leaders' THEN
    IF NEW.role OPERATOR(pg_catalog.=) '{OLD_ROLE}' THEN
      RAISE EXCEPTION '{REFUSAL}' USING ERRCODE = 'check_violation';
    END IF;
  ELSIF NEW.code_revision IS NULL OR NEW.code_revision OPERATOR(pg_catalog.<)
        (SELECT m.value FROM {schema}.meta m WHERE m.key OPERATOR(pg_catalog.=) 'min_code') THEN
    RAISE EXCEPTION '{REFUSAL}' USING ERRCODE = 'check_violation';
  END IF;
  RETURN NEW;
END $f$;
CREATE TRIGGER fence_old_leader BEFORE INSERT OR UPDATE ON leaders
  FOR EACH ROW EXECUTE FUNCTION {schema}.tpuq_fence_old_code();
CREATE TRIGGER fence_old_assign BEFORE INSERT ON attempts
  FOR EACH ROW EXECUTE FUNCTION {schema}.tpuq_fence_old_code();
CREATE TRIGGER fence_old_start BEFORE UPDATE OF started_at ON attempts
  FOR EACH ROW EXECUTE FUNCTION {schema}.tpuq_fence_old_code();
"""


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("code_revision", sa.String(32)))
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(sa.Column("code_revision", sa.String(32)))
    meta = sa.table("meta", sa.column("key", sa.String), sa.column("value", sa.Text))
    op.execute(meta.delete().where(meta.c.key == "min_code"))
    op.bulk_insert(meta, [{"key": "min_code", "value": revision}])
    # an old agent's lease ends here (the next agent of this revision leads at once), and
    # its next renewal finds no row: it then asks to insert one, and takes the refusal
    # quietly for "another agent leads"
    op.execute(sa.text("DELETE FROM leaders WHERE role = :r").bindparams(r=OLD_ROLE))
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        schema = bind.dialect.identifier_preparer.quote(
            bind.scalar(sa.text("SELECT current_schema()")))
        op.execute(postgres(schema))
        return
    for sql in SQLITE:
        op.execute(sql)


def downgrade_loses(bind: sa.Connection) -> list[str]:
    """Nothing: the fence's columns say only which code wrote a row."""
    return []


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute("DROP TRIGGER fence_old_leader ON leaders")
        op.execute("DROP TRIGGER fence_old_assign ON attempts")
        op.execute("DROP TRIGGER fence_old_start ON attempts")
        op.execute("DROP FUNCTION tpuq_fence_old_code()")
    else:
        for name in SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER {name}")
    op.execute(sa.text("DELETE FROM meta WHERE key = 'min_code'"))
    with op.batch_alter_table("hosts") as batch:
        batch.drop_column("code_revision")
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("code_revision")
