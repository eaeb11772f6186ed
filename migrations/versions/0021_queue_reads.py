"""how a pass reads the queue: a job row's version, and fresh statistics

Revision ID: 0021
Revises: 0020

`jobs.row_version` counts the updates of a job's row, kept by the database itself (a
trigger on each dialect), so no writer, old or new, can change a row without it: the
scheduler keeps the queued rows it read and reads again only those whose version moved
(tpuq/state/snapshot.py). A plain ADD COLUMN with a default (no table is rebuilt on
SQLite). Users may read it (queries.JOB_COLUMNS reads every column but the secret ones),
never write it; older code ignores it, so the oldest code admitted stays as it was.

- SQLite: an AFTER UPDATE trigger sets the row's version one higher, unless the update
  set it itself (the trigger's own update does not fire it again: SQLite's recursive
  triggers are off, and its WHEN says so anyway). Its change is not counted in the
  statement's changed rows (SQLite counts only the statement's own).
- PostgreSQL: a BEFORE UPDATE trigger sets NEW's version one higher than OLD's. Its name
  sorts after guard_job_change (triggers of one kind fire in name order), so the guard
  compares rows without this change. The function names nothing through the search path
  (its operator is qualified), so it needs no search_path of its own.

PostgreSQL also analyzes `jobs` and `job_deps` after every ANALYZED_AFTER changed rows,
whatever their size (by default: after a tenth of the table changed). A pass's read of
the open dependency links is planned from the statistics: with 2,000 queued jobs in a
table whose statistics still say few are queued, it was planned as 2,000 probes of
`job_deps` from the queued jobs (5 ms a pass) instead of from the few links (0.4 ms),
and a large history kept such statistics until a tenth of it changed.
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

ANALYZED_AFTER = 1000  # changed rows, on PostgreSQL (autovacuum looks once a minute)
ANALYZED = ("jobs", "job_deps")

SQLITE_TRIGGER = """
CREATE TRIGGER job_row_version AFTER UPDATE ON jobs FOR EACH ROW
WHEN NEW.row_version = OLD.row_version
BEGIN
  UPDATE jobs SET row_version = OLD.row_version + 1 WHERE id = OLD.id;
END
"""


def _pg_function(schema: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION {schema}.tpuq_job_row_version() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  NEW.row_version := OLD.row_version OPERATOR(pg_catalog.+) 1;
  RETURN NEW;
END $f$;
CREATE TRIGGER job_row_version BEFORE UPDATE ON jobs
  FOR EACH ROW EXECUTE FUNCTION {schema}.tpuq_job_row_version();
"""


def upgrade() -> None:
    op.add_column("jobs", sa.Column("row_version", sa.BigInteger, nullable=False,
                                    server_default="0"))
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute(_pg_function(_schema(bind)))
        op.execute("GRANT SELECT (row_version) ON jobs TO tpuq_user")
        for table in ANALYZED:
            op.execute(f"ALTER TABLE {table} SET (autovacuum_analyze_scale_factor = 0, "
                       f"autovacuum_analyze_threshold = {ANALYZED_AFTER})")
    else:
        op.execute(SQLITE_TRIGGER)


def downgrade() -> None:
    bind = op.get_bind()
    op.execute("DROP TRIGGER job_row_version" +
               (" ON jobs" if bind.dialect.name == "postgresql" else ""))
    if bind.dialect.name == "postgresql":
        for table in ANALYZED:
            op.execute(f"ALTER TABLE {table} RESET (autovacuum_analyze_scale_factor, "
                       "autovacuum_analyze_threshold)")
        op.execute("REVOKE SELECT (row_version) ON jobs FROM tpuq_user")
        op.execute(f"DROP FUNCTION {_schema(bind)}.tpuq_job_row_version()")
    op.drop_column("jobs", "row_version")


def _schema(bind: sa.Connection) -> str:
    return bind.dialect.identifier_preparer.quote(
        bind.scalar(sa.text("SELECT current_schema()")))


def downgrade_loses(bind: sa.Connection) -> list[str]:
    return []  # a count the database keeps: nothing of anybody's work
