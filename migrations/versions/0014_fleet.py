"""fleet: declared TPU VM slots, the controller's record of each, and the VMs it made

Revision ID: 0014
Revises: 0013

`fleet_slots`: what an admin declared (`tpuq fleet apply`), the full spec as JSON, kept
before anything is created. `fleet_members`: one row per VM a slot keeps (its `count`):
the generation whose node or queued resource the controller keeps, what it waits for,
since when, how many tries. `fleet_vms`: each VM made, from READY until gone (its cost).
`hosts.lost_reason`: the controller saw the host's VM preempted or gone; it gets no work
until an agent registers the name again. Users read all of it; admins change the
declared slots; agents (the controller) change everything.
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

TABLES = ("fleet_slots", "fleet_members", "fleet_vms")


def upgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(sa.Column("lost_reason", sa.Text))
    op.create_table(
        "fleet_slots",
        sa.Column("name", sa.String(40), primary_key=True),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("applied_at", sa.Double, nullable=False),
        sa.Column("applied_by", sa.String(64)),
        sa.Column("removed_at", sa.Double),
    )
    op.create_table(
        "fleet_members",
        sa.Column("slot", sa.String(40), primary_key=True),
        sa.Column("idx", sa.Integer, primary_key=True),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("op_name", sa.Text),
        sa.Column("waiting_for", sa.Text),
        sa.Column("since", sa.Double, nullable=False),
        sa.Column("tries", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_try_at", sa.Double),
        sa.Column("error_kind", sa.String(16)),
        sa.Column("node_state", sa.String(24)),
        sa.Column("health", sa.String(32)),
        sa.Column("queued_state", sa.String(32)),
        sa.Column("ready_at", sa.Double),
        sa.Column("joined_at", sa.Double),
        sa.Column("creates", sa.Integer, nullable=False, server_default="0"),
        sa.Column("updated_at", sa.Double, nullable=False),
        sa.CheckConstraint("phase IN ('waiting', 'creating', 'up', 'deleting')",
                           name="fleet_members_phase"),
    )
    op.create_table(
        "fleet_vms",
        sa.Column("node_id", sa.String(64), primary_key=True),
        sa.Column("slot", sa.String(40), nullable=False, index=True),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("chips", sa.Integer, nullable=False),
        sa.Column("ready_at", sa.Double, nullable=False),
        sa.Column("gone_at", sa.Double),
        sa.Column("gone_reason", sa.Text),
    )
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TABLES:
        op.execute(f"""
            GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO tpuq_agent;
            GRANT SELECT ON {table} TO tpuq_user;
            ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;
            CREATE POLICY agents ON {table} TO tpuq_agent USING (true) WITH CHECK (true);
            CREATE POLICY everyone_reads ON {table} FOR SELECT TO tpuq_user USING (true);
        """)
    # what an admin declares; the controller alone writes what it observed and made
    op.execute("""
        GRANT INSERT, UPDATE, DELETE ON fleet_slots TO tpuq_user;
        CREATE POLICY admins_write ON fleet_slots FOR ALL TO tpuq_user
          USING (tpuq_is_admin()) WITH CHECK (tpuq_is_admin());
    """)


def downgrade() -> None:
    for table in TABLES:
        op.drop_table(table)
    with op.batch_alter_table("hosts") as batch:
        batch.drop_column("lost_reason")


def downgrade_loses(bind: sa.Connection) -> list[str]:
    """TPU VMs the controller keeps are known only here: without these rows nobody
    deletes or replaces them."""
    n = bind.scalar(sa.text("SELECT count(*) FROM fleet_vms WHERE gone_at IS NULL"))
    slots = bind.scalar(sa.text("SELECT count(*) FROM fleet_slots WHERE removed_at IS NULL"))
    return [f"{slots} declared fleet slot(s) with {n} live TPU VM(s): remove the slots "
            "(`tpuq fleet apply` of an empty file) and let the controller delete them "
            "first"] if n or slots else []


def downgrade_drops(bind: sa.Connection) -> list[str]:
    n = bind.scalar(sa.text("SELECT count(*) FROM fleet_vms"))
    return [f"the records of {n} ended fleet VM(s) (their chip-hours in `tpuq usage`)"] \
        if n else []
