"""pod slices: hosts know their slice; a slice job runs one task per worker

Revision ID: 0008
Revises: 0007

`hosts.slice_name/slice_worker/slice_type`: the TPU node a host is a worker of, its
worker number and the slice's accelerator type (v4-32). `jobs.workers`: a slice job
needs that many workers of one slice (NULL: a single-host job). `gang_workers`: one row
per worker of a slice job's attempt, the database side of the gang's start barrier and
of each worker's lease and end (tpuq/state/gangs.py).
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

OPEN = "('queued', 'held', 'assigned', 'running', 'preempting')"  # the states of jobs not ended


def upgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(sa.Column("slice_name", sa.String(128)))
        batch.add_column(sa.Column("slice_worker", sa.Integer))
        batch.add_column(sa.Column("slice_type", sa.String(32)))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("workers", sa.Integer))
        batch.create_check_constraint("jobs_workers", "workers IS NULL OR workers > 1")
    op.create_table(
        "gang_workers",
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), primary_key=True),
        sa.Column("attempt", sa.Integer, primary_key=True),
        sa.Column("worker", sa.Integer, primary_key=True),
        sa.Column("host", sa.String(128), nullable=False, index=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("lease_expires_at", sa.Double),
        sa.Column("pid", sa.Integer),
        sa.Column("proc_start", sa.BigInteger),
        sa.Column("started_at", sa.Double),
        sa.Column("ended_at", sa.Double),
        sa.Column("outcome", sa.String(16)),
        sa.Column("untouched", sa.Boolean),
        sa.Column("exit_code", sa.Integer),
        sa.Column("exit_signal", sa.Integer),
        sa.Column("reason", sa.Text),
        sa.Column("log_path", sa.Text),
        sa.CheckConstraint("state IN ('assigned', 'ready', 'running', 'ended')",
                           name="gang_workers_state"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("""
GRANT SELECT (workers) ON jobs TO tpuq_user;
GRANT INSERT (workers) ON jobs TO tpuq_user;
GRANT SELECT, INSERT, UPDATE, DELETE ON gang_workers TO tpuq_agent;
GRANT SELECT ON gang_workers TO tpuq_user;
ALTER TABLE gang_workers ENABLE ROW LEVEL SECURITY;
CREATE POLICY agents ON gang_workers TO tpuq_agent USING (true) WITH CHECK (true);
CREATE POLICY everyone_reads ON gang_workers FOR SELECT TO tpuq_user USING (true);
""")


def downgrade() -> None:
    op.drop_table("gang_workers")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint("jobs_workers", type_="check")
        batch.drop_column("workers")
    with op.batch_alter_table("hosts") as batch:
        batch.drop_column("slice_type")
        batch.drop_column("slice_worker")
        batch.drop_column("slice_name")


def downgrade_loses(bind: sa.Connection) -> list[str]:
    ids = bind.scalars(sa.text(f"""SELECT id FROM jobs WHERE workers IS NOT NULL
                                  AND state IN {OPEN} ORDER BY id""")).all()
    return [f"{len(ids)} open slice job(s) ({_some(ids)}): they would run on one "
            "host"] if ids else []


def downgrade_drops(bind: sa.Connection) -> list[str]:
    n = bind.scalar(sa.text("SELECT count(*) FROM gang_workers"))
    return [f"{n} slice worker record(s) of ended attempts"] if n else []


def _some(ids: list[int]) -> str:
    return ", ".join(map(str, ids[:8])) + (", ..." if len(ids) > 8 else "")
