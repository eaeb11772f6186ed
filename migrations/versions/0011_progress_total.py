"""progress totals: a job that reports how many steps it will take gets an ETA

Revision ID: 0011
Revises: 0010

`attempts.checkpoint_total`: the total the job gave with its last reported step
(`tpuq.job.checkpointed(step, total=N)`); `attempts.eta_at`: when it should reach it at
the rate of its recent reports (the agent computes it from the progress file). Users read
attempts whole (0003's table grant), so no grant is needed.
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("checkpoint_total", sa.BigInteger))
        batch.add_column(sa.Column("eta_at", sa.Double))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("eta_at")
        batch.drop_column("checkpoint_total")


def downgrade_loses(bind: sa.Connection) -> list[str]:
    return []  # running jobs report their totals again; only the ETA waits for it


def downgrade_drops(bind: sa.Connection) -> list[str]:
    n = bind.scalar(sa.text("SELECT count(*) FROM attempts WHERE checkpoint_total IS NOT NULL"))
    return [f"the progress totals of {n} attempt(s)"] if n else []
