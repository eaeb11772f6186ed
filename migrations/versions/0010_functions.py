"""function jobs: a pickled Python callable in, its value or exception out

Revision ID: 0010
Revises: 0009

`job_functions`: for a job submitted with `tpuq.client.submit(fn, ...)`, the cloudpickled
(fn, args, kwargs) and, once an attempt ran it, the pickled outcome (its value, or its
exception with the remote traceback). Kept in the database so every machine of the
deployment can read a result; only the job's owner (and admins, and agents) may.
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

OPEN = "('queued', 'held', 'assigned', 'running', 'preempting')"  # the states of jobs not ended


def upgrade() -> None:
    op.create_table(
        "job_functions",
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), primary_key=True),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("result", sa.LargeBinary),
        sa.Column("result_attempt", sa.Integer),
        sa.Column("result_at", sa.Double),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("""
GRANT SELECT, INSERT, UPDATE, DELETE ON job_functions TO tpuq_agent;
GRANT SELECT, INSERT ON job_functions TO tpuq_user;
ALTER TABLE job_functions ENABLE ROW LEVEL SECURITY;
CREATE POLICY agents ON job_functions TO tpuq_agent USING (true) WITH CHECK (true);
CREATE POLICY owners_read ON job_functions FOR SELECT TO tpuq_user USING (
  EXISTS (SELECT 1 FROM jobs j WHERE j.id = job_id
          AND (j.owner = current_user OR tpuq_is_admin())));
CREATE POLICY owners_submit ON job_functions FOR INSERT TO tpuq_user WITH CHECK (
  result IS NULL AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = job_id
                             AND j.owner = current_user AND j.attempt = 0));
""")


def downgrade() -> None:
    op.drop_table("job_functions")


def downgrade_loses(bind: sa.Connection) -> list[str]:
    n = bind.scalar(sa.text(f"""SELECT count(*) FROM job_functions f JOIN jobs j
                               ON j.id = f.job_id WHERE j.state IN {OPEN}"""))
    return [f"{n} open function job(s) (tpuq.client.submit(fn)): their calls are stored "
            "only there"] if n else []


def downgrade_drops(bind: sa.Connection) -> list[str]:
    n = bind.scalar(sa.text("SELECT count(*) FROM job_functions WHERE result IS NOT NULL"))
    return [f"the results of {n} function job(s)"] if n else []
