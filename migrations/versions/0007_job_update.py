"""`tpuq update`: a queued job's owner may change its priority and time limit

Revision ID: 0007
Revises: 0006
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        # the change_own policy of 0003 limits it to the job's owner and admins
        op.execute("GRANT UPDATE (priority, time_limit_s) ON jobs TO tpuq_user")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("REVOKE UPDATE (priority, time_limit_s) ON jobs FROM tpuq_user")


def downgrade_loses(bind: object) -> list[str]:
    return []
