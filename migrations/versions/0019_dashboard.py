"""the dashboard: sign-in tokens, the scheduler's pass times, indexes for scrapes

Revision ID: 0019
Revises: 0012

`web_tokens`: tokens an admin issues for signing in to `tpuq web` (only a SHA-256 of
each is stored; the token itself is shown once). On PostgreSQL agents (the role the
dashboard runs as) read and write them; users' login roles reach them only as admins.
`leaders.pass_*`: the leader's scheduling passes (count, total and last duration),
written with its lease renewal, so a metrics scrape in any process reads them.
Indexes: attempts by start time and outcome, and open jobs by team, so a scrape reads
what changed instead of scanning every attempt (tpuq/state/aggregates.py).
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "web_tokens",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("user", sa.String(64), nullable=False, index=True),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("label", sa.String(200)),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("created_by", sa.String(64), nullable=False),
        sa.Column("expires_at", sa.Double),
        sa.Column("revoked_at", sa.Double),
    )
    with op.batch_alter_table("leaders") as batch:
        batch.add_column(sa.Column("pass_count", sa.BigInteger))
        batch.add_column(sa.Column("pass_seconds_sum", sa.Double))
        batch.add_column(sa.Column("pass_seconds_last", sa.Double))
    op.create_index("ix_attempts_started_at", "attempts", ["started_at"])
    op.create_index("ix_attempts_outcome", "attempts", ["outcome"])
    op.create_index("ix_jobs_state_team", "jobs", ["state", "team"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute("""
GRANT SELECT, INSERT, UPDATE, DELETE ON web_tokens TO tpuq_agent, tpuq_user;
GRANT USAGE, SELECT ON SEQUENCE web_tokens_id_seq TO tpuq_agent, tpuq_user;
ALTER TABLE web_tokens ENABLE ROW LEVEL SECURITY;
CREATE POLICY agents ON web_tokens TO tpuq_agent USING (true) WITH CHECK (true);
CREATE POLICY admins_only ON web_tokens FOR ALL TO tpuq_user
  USING (tpuq_is_admin()) WITH CHECK (tpuq_is_admin());
""")


def downgrade() -> None:
    op.drop_index("ix_jobs_state_team", "jobs")
    op.drop_index("ix_attempts_outcome", "attempts")
    op.drop_index("ix_attempts_started_at", "attempts")
    with op.batch_alter_table("leaders") as batch:
        batch.drop_column("pass_seconds_last")
        batch.drop_column("pass_seconds_sum")
        batch.drop_column("pass_count")
    op.drop_table("web_tokens")
