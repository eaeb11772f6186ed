"""notifications: a job tells its owner when it ends; the outbox of what is to be sent

Revision ID: 0009
Revises: 0008

`jobs.notify`: the events the owner asked to hear of (`end`, `fail`, `preempt`, comma
separated; NULL: none). `jobs.notify_to`: where to (Apprise URLs, one per line), which
may hold a webhook's token or a mail password: agents read it, users never do (no column
grant). `notifications`: the outbox, one row per event, written in the transaction of
the job's state change (state/transitions.py), so a crash never loses one; agents claim,
send and retry them (tpuq/agent/duties/notifier.py).
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

OPEN = "('queued', 'held', 'assigned', 'running', 'preempting')"  # the states of jobs not ended


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("notify", sa.String(32)))
        batch.add_column(sa.Column("notify_to", sa.Text))
    op.create_table(
        "notifications",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False, index=True),
        sa.Column("event", sa.String(16), nullable=False),
        sa.Column("preemptions", sa.Integer),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("tries", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_at", sa.Double, nullable=False),
        sa.Column("claimed_by", sa.String(128)),
        sa.Column("claimed_until", sa.Double),
        sa.Column("sent_at", sa.Double),
        sa.Column("last_error", sa.Text),
        sa.Column("sent_to", sa.String(64)),
        sa.CheckConstraint("state IN ('pending', 'sent', 'failed', 'skipped')",
                           name="notifications_state"),
    )
    op.create_index("notifications_due", "notifications", ["state", "next_at"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute("""
GRANT SELECT (notify) ON jobs TO tpuq_user;
GRANT INSERT (notify, notify_to) ON jobs TO tpuq_user;
GRANT SELECT, INSERT, UPDATE, DELETE ON notifications TO tpuq_agent;
GRANT SELECT, INSERT ON notifications TO tpuq_user;
GRANT USAGE, SELECT ON SEQUENCE notifications_id_seq TO tpuq_agent, tpuq_user;
ALTER TABLE notifications ENABLE ROW LEVEL SECURITY;
CREATE POLICY agents ON notifications TO tpuq_agent USING (true) WITH CHECK (true);
CREATE POLICY everyone_reads ON notifications FOR SELECT TO tpuq_user USING (true);
CREATE POLICY own_jobs ON notifications FOR INSERT TO tpuq_user WITH CHECK (
  state = 'pending' AND tries = 0 AND claimed_by IS NULL
  AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = job_id
              AND (j.owner = current_user OR tpuq_is_admin())));
""")


def downgrade() -> None:
    op.drop_table("notifications")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("notify_to")
        batch.drop_column("notify")


def downgrade_loses(bind: sa.Connection) -> list[str]:
    pending = bind.scalar(sa.text("SELECT count(*) FROM notifications "
                                  "WHERE state = 'pending'"))
    asked = bind.scalar(sa.text("SELECT count(*) FROM jobs WHERE notify IS NOT NULL "
                                f"AND state IN {OPEN}"))
    return [f"{n} {what}" for n, what in (
        (pending, "notification(s) not sent yet"),
        (asked, "open job(s) whose owners asked to be told when they end")) if n]


def downgrade_drops(bind: sa.Connection) -> list[str]:
    n = bind.scalar(sa.text("SELECT count(*) FROM notifications"))
    return [f"the record of {n} notification(s)"] if n else []
