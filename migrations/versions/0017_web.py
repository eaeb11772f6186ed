"""the dashboard: sign-in tokens, the scheduler's pass times, indexes for scrapes

Revision ID: 0017
Revises: 0016

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

revision = "0017"
down_revision = "0016"
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
    # plain ALTERs, not a batch: a batch rebuild of `leaders` on SQLite would drop the
    # triggers 0015 fences old code with
    op.add_column("leaders", sa.Column("pass_count", sa.BigInteger))
    op.add_column("leaders", sa.Column("pass_seconds_sum", sa.Double))
    op.add_column("leaders", sa.Column("pass_seconds_last", sa.Double))
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
    _admit(revision)


def downgrade() -> None:
    op.drop_index("ix_jobs_state_team", "jobs")
    op.drop_index("ix_attempts_outcome", "attempts")
    op.drop_index("ix_attempts_started_at", "attempts")
    _admit(down_revision)
    for column in ("pass_seconds_last", "pass_seconds_sum", "pass_count"):
        op.drop_column("leaders", column)  # SQLite >= 3.35 drops a column in place
    op.drop_table("web_tokens")


def _admit(code: str) -> None:
    """The oldest code the database admits: code before the dashboard's tables leads
    without recording its passes, which `/metrics` reports."""
    op.execute(sa.text("UPDATE meta SET value = :v WHERE key = 'min_code'").bindparams(v=code))


def downgrade_loses(bind: sa.Connection) -> list[str]:
    return []  # nothing open depends on tokens, pass times or indexes


def downgrade_drops(bind: sa.Connection) -> list[str]:
    n = bind.scalar(sa.text("SELECT count(*) FROM web_tokens WHERE revoked_at IS NULL"))
    return [f"{n} sign-in token(s) of tpuq web"] if n else []
