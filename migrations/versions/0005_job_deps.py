"""job dependencies: `tpuq submit --after ID` / `--after-any ID`

Revision ID: 0005
Revises: 0004

A job waits until each job it depends on has succeeded (kind "ok") or ended at all
(kind "any"); the scheduler cancels an "ok" dependent whose dependency ended otherwise
(tpuq/state/deps.py). Rows are written with the job, by whoever may submit it.
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

OPEN = "('queued', 'held', 'assigned', 'running', 'preempting')"  # the states of jobs not ended


def upgrade() -> None:
    op.create_table(
        "job_deps",
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), primary_key=True),
        sa.Column("after_id", sa.Integer, sa.ForeignKey("jobs.id"), primary_key=True,
                  index=True),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.CheckConstraint("kind IN ('ok', 'any')", name="job_deps_kind"),
        sa.CheckConstraint("job_id <> after_id", name="job_deps_not_self"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("""
GRANT SELECT, INSERT, UPDATE, DELETE ON job_deps TO tpuq_agent;
GRANT SELECT, INSERT ON job_deps TO tpuq_user;
ALTER TABLE job_deps ENABLE ROW LEVEL SECURITY;
CREATE POLICY agents ON job_deps TO tpuq_agent USING (true) WITH CHECK (true);
CREATE POLICY everyone_reads ON job_deps FOR SELECT TO tpuq_user USING (true);
CREATE POLICY own_jobs ON job_deps FOR INSERT TO tpuq_user WITH CHECK (
    EXISTS (SELECT 1 FROM jobs WHERE jobs.id = job_id AND jobs.owner = current_user));
""")


def downgrade() -> None:
    op.drop_table("job_deps")


def downgrade_loses(bind: sa.Connection) -> list[str]:
    ids = bind.scalars(sa.text(f"""SELECT DISTINCT j.id FROM job_deps d JOIN jobs j
                                  ON j.id = d.job_id WHERE j.state IN {OPEN}
                                  ORDER BY j.id""")).all()
    return [f"the dependencies (--after) of {len(ids)} open job(s) ({_some(ids)}): they "
            "would start without waiting"] if ids else []


def downgrade_drops(bind: sa.Connection) -> list[str]:
    n = bind.scalar(sa.text("SELECT count(*) FROM job_deps"))
    return [f"{n} dependency record(s) of ended jobs"] if n else []


def _some(ids: list[int]) -> str:
    return ", ".join(map(str, ids[:8])) + (", ..." if len(ids) > 8 else "")
