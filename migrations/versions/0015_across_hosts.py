"""across hosts: where a job's checkpoints live, hosts that stopped answering, hand-overs

Revision ID: 0015
Revises: 0012

`jobs.checkpoint_dir` / `jobs.checkpoint_host`: where the job's checkpoints live (a path
or a `gs://` URL) and, when that directory is on one host's disk only, which host; written
by the scheduler with each assignment, from the host's registration
(`hosts.checkpoint_root`: the deployment's shared checkpoint root as that agent was
configured, NULL for checkpoints under its own TPUQ_HOME). `jobs.checkpoint_seen_at`: when
that host's agent first saw the directory hold something (a job whose host-local
directory is empty has nothing to wait for). `attempts.started_over`: why an
attempt starts without its job's earlier checkpoints (they are on a host it cannot
reach). `hosts.lost_at`: when the reaper last requeued work whose lease this host stopped
renewing; it gets no work until it is heard from again. `hosts.handover_until`: a
handed-over host's jobs wait for a new agent until then. `notifications.detail`: what the
event was about, in the words of the moment it happened.

Plain ADD COLUMNs (no table is rebuilt on SQLite). Users read attempts, hosts and
notifications whole (0003, 0009); the two job columns are granted here.
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0012"
branch_labels = None
depends_on = None

COLUMNS = (
    ("jobs", sa.Column("checkpoint_dir", sa.Text)),
    ("jobs", sa.Column("checkpoint_host", sa.String(128))),
    ("jobs", sa.Column("checkpoint_seen_at", sa.Double)),
    ("attempts", sa.Column("started_over", sa.Text)),
    ("hosts", sa.Column("checkpoint_root", sa.Text)),
    ("hosts", sa.Column("lost_at", sa.Double)),
    ("hosts", sa.Column("handover_until", sa.Double)),
    ("notifications", sa.Column("detail", sa.Text)),
)
JOB_COLUMNS = ", ".join(c.name for table, c in COLUMNS if table == "jobs")


def upgrade() -> None:
    for table, column in COLUMNS:
        op.add_column(table, column)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"GRANT SELECT ({JOB_COLUMNS}) ON jobs TO tpuq_user")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"REVOKE SELECT ({JOB_COLUMNS}) ON jobs FROM tpuq_user")
    for table, column in reversed(COLUMNS):
        with op.batch_alter_table(table) as batch:
            batch.drop_column(column.name)
