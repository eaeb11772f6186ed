"""across hosts: where a job's checkpoints live, hosts that stopped answering, hand-overs

Revision ID: 0018
Revises: 0017

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

revision = "0018"
down_revision = "0017"
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
    _admit(revision)


def downgrade() -> None:
    _admit(down_revision)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"REVOKE SELECT ({JOB_COLUMNS}) ON jobs FROM tpuq_user")
    for table, column in reversed(COLUMNS):
        # in place, not a batch: a SQLite rebuild of `attempts` would drop the triggers
        # 0015 fences old code with (SQLite >= 3.35 drops a column in place)
        op.drop_column(table, column.name)


def _admit(code: str) -> None:
    """The oldest code the database admits: older code puts a job's checkpoint directory
    under each host's own TPUQ_HOME, so a job resumed by it would not find its checkpoints
    on a shared root."""
    op.execute(sa.text("UPDATE meta SET value = :v WHERE key = 'min_code'").bindparams(v=code))


OPEN = "('queued', 'held', 'assigned', 'running', 'preempting')"


def downgrade_loses(bind: sa.Connection) -> list[str]:
    n = bind.scalar(sa.text(f"SELECT count(*) FROM jobs WHERE state IN {OPEN} "
                            "AND checkpoint_dir IS NOT NULL"))
    return [f"{n} open job(s) whose checkpoints are where this schema records (a shared "
            "root, or one host's disk): older code would resume them from elsewhere"] \
        if n else []


def downgrade_drops(bind: sa.Connection) -> list[str]:
    n = bind.scalar(sa.text("SELECT count(*) FROM jobs WHERE checkpoint_dir IS NOT NULL"))
    return [f"where the checkpoints of {n} ended job(s) lived"] if n else []
