"""users' broker accounts, and log budgets

Revision ID: 0016
Revises: 0015

`broker_accounts`: each user's own Redis account (tpuq/queue/accounts.py), made by `tpuq
user add` beside their login role and put into Redis by every agent: the name and the
SHA-256 of its password (what Redis itself keeps). Agents read it; users do not.

`log_usage`: what each owner's job logs take on each host's disk, and the budget they are
held to, as each host's agent measures it (tpuq/agent/duties/logkeeper.py).
Everyone reads it (`tpuq status` names who is over budget); agents write it.

`hosts.disk_low`: why a host takes no work for want of disk, or NULL.
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "broker_accounts",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("password_sha256", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
    )
    op.create_table(
        "log_usage",
        sa.Column("owner", sa.String(128), primary_key=True),
        sa.Column("place", sa.String(128), primary_key=True),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("budget", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(sa.Column("disk_low", sa.Text))
    if op.get_bind().dialect.name == "postgresql":
        op.execute("""
REVOKE ALL ON broker_accounts, log_usage FROM PUBLIC;
GRANT SELECT ON broker_accounts TO tpuq_agent;
GRANT SELECT, INSERT, UPDATE, DELETE ON log_usage TO tpuq_agent;
GRANT SELECT ON log_usage TO tpuq_user;
""")
    _admit(revision)


def downgrade() -> None:
    _admit(down_revision)
    with op.batch_alter_table("hosts") as batch:
        batch.drop_column("disk_low")
    op.drop_table("log_usage")
    op.drop_table("broker_accounts")


def _admit(code: str) -> None:
    """The oldest code the database admits (0015): older agents write output where users'
    broker accounts cannot read it and do not hear a laptop's doorbell."""
    op.execute(sa.text("UPDATE meta SET value = :v WHERE key = 'min_code'").bindparams(v=code))


def downgrade_loses(bind: sa.Connection) -> list[str]:
    return []  # no open work depends on either table; hosts measure their logs again


def downgrade_drops(bind: sa.Connection) -> list[str]:
    n = bind.scalar(sa.text("SELECT count(*) FROM broker_accounts"))
    return [f"the broker accounts of {n} user(s) (`tpuq logs` from their laptops stops "
            "working; `tpuq user grant NAME` makes each a new one after an upgrade)"] if n else []
