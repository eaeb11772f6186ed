"""a TPU host's proven shapes, and what a submit dropped from the submitter's environment

Revision ID: 0013
Revises: 0012

`hosts.unavailable`: the chip shapes a host does not offer and why (a probe's error, or
a reason the whole host offers nothing, key "*"), as JSON `{"2": "probe failed: ..."}`;
NULL when it offers every shape of its table (docs/tpu-vm.md, shape probes). Users read
hosts whole (0003's table grant).
`jobs.env_dropped`: the names tpuq dropped from the submitter's environment because they
change what JAX and libtpu see (`tpuq show` lists them). Users insert and read it.
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(sa.Column("unavailable", sa.JSON))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("env_dropped", sa.JSON))
    if op.get_bind().dialect.name == "postgresql":
        op.execute("GRANT SELECT (env_dropped), INSERT (env_dropped) ON jobs TO tpuq_user")


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("env_dropped")
    with op.batch_alter_table("hosts") as batch:
        batch.drop_column("unavailable")


def downgrade_loses(bind: sa.Connection) -> list[str]:
    # hosts probe their shapes again at their agents' next start; what a submit dropped
    # from an environment is a record, not work
    return []


def downgrade_drops(bind: sa.Connection) -> list[str]:
    n = bind.scalar(sa.text("SELECT count(*) FROM jobs WHERE env_dropped IS NOT NULL"))
    return [f"the names dropped from the environments of {n} job(s)"] if n else []
