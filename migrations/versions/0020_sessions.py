"""sessions: interactive jobs started on their caller's terminal (`tpuq run`)

Revision ID: 0020
Revises: 0019

`jobs.session`: the job is an interactive session. Its host starts it only on the
terminal its caller hands the agent, and it is never requeued (a person was attached to
it). A plain ADD COLUMN with a default (no table is rebuilt on SQLite); users may read
it and set it when they submit.
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("session", sa.Boolean, nullable=False,
                                    server_default=sa.false()))
    if op.get_bind().dialect.name == "postgresql":
        op.execute("GRANT SELECT (session), INSERT (session) ON jobs TO tpuq_user")
    _admit(revision)


def downgrade() -> None:
    _admit(down_revision)
    if op.get_bind().dialect.name == "postgresql":
        op.execute("REVOKE SELECT (session), INSERT (session) ON jobs FROM tpuq_user")
    op.drop_column("jobs", "session")


def _admit(code: str) -> None:
    """The oldest code the database admits: older code would start a session without
    its terminal, and requeue it."""
    op.execute(sa.text("UPDATE meta SET value = :v WHERE key = 'min_code'").bindparams(v=code))


OPEN = "('queued', 'held', 'assigned', 'running', 'preempting')"


def downgrade_loses(bind: sa.Connection) -> list[str]:
    n = bind.scalar(sa.text(f"SELECT count(*) FROM jobs WHERE state IN {OPEN} AND session"))
    return [f"{n} open session(s): older code would start them without their terminal"] \
        if n else []


def downgrade_drops(bind: sa.Connection) -> list[str]:
    n = bind.scalar(sa.text("SELECT count(*) FROM jobs WHERE session"))
    return [f"which {n} ended job(s) were sessions"] if n else []
