"""Flow definitions per owner: ``owner`` (a tenant id, or ``*`` deployment-wide) leads the
primary keys of ``flows`` and ``flow_latest``; every definition stored before is shared.

Revision ID: 0002
Revises: 0001
Create Date: 2025-07-20
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies as of this revision (see 0001).
TENANT = sa.String(64)
SHARED_OWNER = "*"
FLOW_KEY = ["owner", "flow_id", "version"]


def upgrade() -> None:
    with op.batch_alter_table("flow_latest") as table:
        table.drop_constraint("fk_flow_latest_flows", type_="foreignkey")
    # The default fills the rows already there (definitions were deployment-wide), and is
    # dropped at once: a write that names no owner must fail, never land in the shared one.
    for name, key in (("flows", FLOW_KEY), ("flow_latest", ["owner", "flow_id"])):
        with op.batch_alter_table(name) as table:
            table.add_column(
                sa.Column("owner", TENANT, nullable=False, server_default=SHARED_OWNER)
            )
            table.drop_constraint(f"pk_{name}", type_="primary")
            table.create_primary_key(f"pk_{name}", key)
        with op.batch_alter_table(name) as table:
            table.alter_column("owner", server_default=None)
    with op.batch_alter_table("flow_latest") as table:
        table.create_foreign_key("fk_flow_latest_flows", "flows", FLOW_KEY, FLOW_KEY)


def downgrade() -> None:
    # Tenants' own definitions have no place in the older schema; only shared ones stay.
    op.execute(sa.text(f"DELETE FROM flow_latest WHERE owner <> '{SHARED_OWNER}'"))
    op.execute(sa.text(f"DELETE FROM flows WHERE owner <> '{SHARED_OWNER}'"))
    with op.batch_alter_table("flow_latest") as table:
        table.drop_constraint("fk_flow_latest_flows", type_="foreignkey")
    for name, key in (("flows", ["flow_id", "version"]), ("flow_latest", ["flow_id"])):
        with op.batch_alter_table(name) as table:
            table.drop_constraint(f"pk_{name}", type_="primary")
            table.create_primary_key(f"pk_{name}", key)
            table.drop_column("owner")
    with op.batch_alter_table("flow_latest") as table:
        table.create_foreign_key(
            "fk_flow_latest_flows", "flows", ["flow_id", "version"], ["flow_id", "version"]
        )
