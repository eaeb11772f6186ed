"""host identity: which agent holds a host name

Revision ID: 0004
Revises: 0003

A host row names the machine and the state directory of the agent that holds it, and
that agent's instance (a random id per start). An agent refuses a name that a live
agent elsewhere holds; the row's heartbeat, busy flag and stop mark change only
through the instance that holds it (tpuq/state/hosts.py). Admins may delete the row of
a host that is gone (`tpuq host forget`).
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(sa.Column("machine_id", sa.String(64)))
        batch.add_column(sa.Column("home", sa.Text))
        batch.add_column(sa.Column("agent_instance", sa.String(32)))
    if op.get_bind().dialect.name == "postgresql":
        # the admins_write policy of 0003 limits it to admins
        op.execute("GRANT DELETE ON hosts TO tpuq_user")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("REVOKE DELETE ON hosts FROM tpuq_user")
    with op.batch_alter_table("hosts") as batch:
        for name in ("agent_instance", "home", "machine_id"):
            batch.drop_column(name)


def downgrade_loses(bind: sa.Connection) -> list[str]:
    return []  # agents register their identity again at start
