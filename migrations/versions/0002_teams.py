"""teams: shares, quotas, budgets, members; index for usage accounting

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

F = sa.Double


def upgrade() -> None:
    op.create_table(
        "teams",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("share", F, nullable=False),
        sa.Column("max_chips", sa.Integer),
        sa.Column("max_chips_per_user", sa.Integer),
        sa.Column("max_chips_by_type", sa.JSON, nullable=False),
        sa.Column("budget_chip_hours", F),
        sa.Column("budget_period", sa.String(8), nullable=False),
        sa.Column("grant_expires_at", F),
    )
    op.create_table(
        "team_members",
        sa.Column("team", sa.String(64), sa.ForeignKey("teams.name", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("user", sa.String(64), primary_key=True),
    )
    op.create_index("ix_team_members_user", "team_members", ["user"])
    with op.batch_alter_table("attempts") as batch:
        batch.create_index("ix_attempts_ended_at", ["ended_at"])


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_index("ix_attempts_ended_at")
    op.drop_index("ix_team_members_user", table_name="team_members")
    op.drop_table("team_members")
    op.drop_table("teams")


def downgrade_loses(bind: sa.Connection) -> list[str]:
    return []


def downgrade_drops(bind: sa.Connection) -> list[str]:
    n = bind.scalar(sa.text("SELECT count(*) FROM teams"))
    return [f"the quotas and members of {n} team(s)"] if n else []
