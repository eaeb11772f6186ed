"""core: jobs, attempts, events, hosts, allocations, leaders

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

F = sa.Double


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200)),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("command", sa.JSON, nullable=False),
        sa.Column("cwd", sa.Text, nullable=False),
        sa.Column("env", sa.JSON, nullable=False),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("team", sa.String(64), nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("chips", sa.Integer),
        sa.Column("tpu_type", sa.String(32)),
        sa.Column("stop_signal", sa.String(16), nullable=False),
        sa.Column("grace_s", F, nullable=False),
        sa.Column("time_limit_s", F),
        sa.Column("max_retries", sa.Integer, nullable=False),
        sa.Column("failures", sa.Integer, nullable=False),
        sa.Column("preemptions", sa.Integer, nullable=False),
        sa.Column("requeue_on_preempt", sa.Boolean, nullable=False),
        sa.Column("tcmalloc", sa.Boolean, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("host", sa.String(128)),
        sa.Column("lease_expires_at", F),
        sa.Column("stop_request", sa.String(16)),
        sa.Column("not_before", F),
        sa.Column("resubmit_of", sa.Integer, sa.ForeignKey("jobs.id")),
        sa.Column("submitted_at", F, nullable=False),
        sa.Column("updated_at", F, nullable=False),
        sa.Column("ended_at", F),
        sa.Column("exit_code", sa.Integer),
        sa.Column("exit_signal", sa.Integer),
        sa.Column("reason", sa.Text),
    )
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.create_index("ix_jobs_team", "jobs", ["team"])
    op.create_index("ix_jobs_host", "jobs", ["host"])
    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("host", sa.String(128), nullable=False),
        sa.Column("chips", sa.JSON, nullable=False),
        sa.Column("assigned_at", F, nullable=False),
        sa.Column("boot_id", sa.String(64)),
        sa.Column("pid", sa.Integer),
        sa.Column("proc_start", sa.BigInteger),
        sa.Column("started_at", F),
        sa.Column("ended_at", F),
        sa.Column("outcome", sa.String(16)),
        sa.Column("exit_code", sa.Integer),
        sa.Column("exit_signal", sa.Integer),
        sa.Column("reason", sa.Text),
        sa.Column("log_path", sa.Text),
        sa.Column("checkpoint_step", sa.BigInteger),
        sa.Column("checkpoint_at", F),
        sa.UniqueConstraint("job_id", "number"),
    )
    op.create_index("ix_attempts_job_id", "attempts", ["job_id"])
    op.create_index("ix_attempts_host", "attempts", ["host"])
    op.create_table(
        "job_events",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("at", F, nullable=False),
        sa.Column("from_state", sa.String(16)),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("actor", sa.String(128)),
    )
    op.create_index("ix_job_events_job_id", "job_events", ["job_id"])
    op.create_table(
        "hosts",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("tpu_type", sa.String(32)),
        sa.Column("chips", sa.JSON, nullable=False),
        sa.Column("boot_id", sa.String(64)),
        sa.Column("agent_pid", sa.Integer),
        sa.Column("started_at", F),
        sa.Column("heartbeat_at", F),
        sa.Column("draining", sa.Boolean, nullable=False),
        sa.Column("busy_reason", sa.Text),
        sa.Column("stopped_at", F),
    )
    op.create_table(
        "allocations",
        sa.Column("host", sa.String(128), primary_key=True),
        sa.Column("chip", sa.Integer, primary_key=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
    )
    op.create_index("ix_allocations_job_id", "allocations", ["job_id"])
    op.create_table(
        "leaders",
        sa.Column("role", sa.String(32), primary_key=True),
        sa.Column("holder", sa.String(200), nullable=False),
        sa.Column("expires_at", F, nullable=False),
    )


def downgrade() -> None:
    for table in ("leaders", "allocations", "hosts", "job_events", "attempts", "jobs"):
        op.drop_table(table)


def downgrade_loses(bind: sa.Connection) -> list[str]:
    return ["the whole schema: every job, attempt and host"]
