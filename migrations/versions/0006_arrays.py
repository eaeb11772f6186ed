"""job arrays: `tpuq submit --array 0-99%8` / `--args-file`

Revision ID: 0006
Revises: 0005

The tasks of an array are jobs of their own (attempts, logs, checkpoint directory each),
submitted in one transaction; `array_id` is the first task's id, `array_index` the
task's index (TPUQ_ARRAY_INDEX), `array_throttle` at most how many tasks run at once.
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

OPEN = "('queued', 'held', 'assigned', 'running', 'preempting')"  # the states of jobs not ended


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("array_id", sa.Integer))
        batch.add_column(sa.Column("array_index", sa.Integer))
        batch.add_column(sa.Column("array_throttle", sa.Integer))
        batch.create_check_constraint("jobs_array_throttle",
                                      "array_throttle IS NULL OR array_throttle > 0")
    op.create_index("ix_jobs_array_id", "jobs", ["array_id"])
    if op.get_bind().dialect.name == "postgresql":
        # users insert their own tasks (the submit policy of 0003 checks the owner)
        op.execute("GRANT SELECT (array_id, array_index, array_throttle) ON jobs TO tpuq_user")
        op.execute("GRANT INSERT (array_id, array_index, array_throttle) ON jobs TO tpuq_user")
        op.execute("GRANT UPDATE (array_id) ON jobs TO tpuq_user")


def downgrade() -> None:
    op.drop_index("ix_jobs_array_id", "jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint("jobs_array_throttle", type_="check")
        for name in ("array_throttle", "array_index", "array_id"):
            batch.drop_column(name)


def downgrade_loses(bind: sa.Connection) -> list[str]:
    ids = bind.scalars(sa.text(f"""SELECT id FROM jobs WHERE array_id IS NOT NULL
                                  AND state IN {OPEN} ORDER BY id""")).all()
    return [f"{len(ids)} open array task(s) ({_some(ids)}): their arrays' limits (%N) "
            "would not hold"] if ids else []


def downgrade_drops(bind: sa.Connection) -> list[str]:
    n = bind.scalar(sa.text("SELECT count(*) FROM jobs WHERE array_id IS NOT NULL"))
    return [f"the array ids of {n} ended task(s)"] if n else []


def _some(ids: list[int]) -> str:
    return ", ".join(map(str, ids[:8])) + (", ..." if len(ids) > 8 else "")
