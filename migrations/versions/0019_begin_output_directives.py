"""SLURM habits: a job's begin time, its output file, where its options came from

Revision ID: 0019
Revises: 0018

`jobs.begin_at`: `--begin`, the job is not started before this time (epoch seconds).
`jobs.output`: `--output PATH`, a file its owner also gets its output in (the agent writes
it as the owner). `jobs.option_sources`: which submit option came from where (`#TPUQ`
directives of the script, the command line, the environment), as `show` says it.

Plain ADD COLUMNs (no table is rebuilt on SQLite); users read and insert them as they do
the other spec columns (0003).
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

COLUMNS = (
    ("jobs", sa.Column("begin_at", sa.Double)),
    ("jobs", sa.Column("output", sa.Text)),
    ("jobs", sa.Column("option_sources", sa.JSON)),
)
JOB_COLUMNS = ", ".join(c.name for table, c in COLUMNS if table == "jobs")


def upgrade() -> None:
    for table, column in COLUMNS:
        op.add_column(table, column)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"GRANT SELECT ({JOB_COLUMNS}), INSERT ({JOB_COLUMNS}) ON jobs TO tpuq_user")
    _admit(revision)


def downgrade() -> None:
    _admit(down_revision)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"REVOKE SELECT ({JOB_COLUMNS}), INSERT ({JOB_COLUMNS}) ON jobs "
                   "FROM tpuq_user")
    for table, column in reversed(COLUMNS):
        op.drop_column(table, column.name)


def _admit(code: str) -> None:
    """The oldest code the database admits: older code would start a job before its
    --begin time and never write its --output file."""
    op.execute(sa.text("UPDATE meta SET value = :v WHERE key = 'min_code'").bindparams(v=code))


OPEN = "('queued', 'held', 'assigned', 'running', 'preempting')"


def downgrade_loses(bind: sa.Connection) -> list[str]:
    n = bind.scalar(sa.text(f"SELECT count(*) FROM jobs WHERE state IN {OPEN} "
                            "AND (begin_at IS NOT NULL OR output IS NOT NULL)"))
    return [f"{n} open job(s) with --begin or --output: older code would start them at "
            "once and not write their output file"] if n else []


def downgrade_drops(bind: sa.Connection) -> list[str]:
    n = bind.scalar(sa.text("SELECT count(*) FROM jobs WHERE begin_at IS NOT NULL "
                            "OR output IS NOT NULL OR option_sources IS NOT NULL"))
    return [f"the --begin, --output and option sources of {n} job(s)"] if n else []
