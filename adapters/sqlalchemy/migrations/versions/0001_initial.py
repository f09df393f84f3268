"""The SQL storage's first schema: executions in parts, leases, heartbeats, tombstones, flows.

Revision ID: 0001
Revises:
Create Date: 2025-07-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of schema.py's types as of this revision: a migration never follows later
# edits of the models.
IDENTIFIER = sa.String().with_variant(sa.String(collation="C"), "postgresql")
TENANT = sa.String(64)


def _execution_key() -> list[sa.Column[str]]:
    return [
        sa.Column("tenant_id", TENANT, nullable=False),
        sa.Column("execution_id", IDENTIFIER, nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "executions",
        *_execution_key(),
        sa.Column("flow_id", IDENTIFIER, nullable=False),
        sa.Column("flow_version", sa.String(), nullable=False),
        sa.Column("fingerprint", sa.String(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("steps", sa.BigInteger(), nullable=False),
        sa.Column("next_node_id", sa.String(), nullable=True),
        sa.Column("last_node_id", sa.String(), nullable=True),
        sa.Column("last_branch", sa.String(), nullable=True),
        sa.Column("subgraph_fingerprint", sa.String(), nullable=True),
        sa.Column("dedup_key", sa.String(), nullable=True),
        sa.Column("input", sa.Text(), nullable=False),
        sa.Column("suspension", sa.Text(), nullable=False),
        sa.Column("result", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "execution_id", name="pk_executions"),
    )
    op.create_index(
        "ix_executions_updated", "executions", ["tenant_id", "updated_at_ms", "execution_id"]
    )
    op.create_index(
        "ix_executions_flow",
        "executions",
        ["tenant_id", "flow_id", "updated_at_ms", "execution_id"],
    )
    op.create_index(
        "ix_executions_status",
        "executions",
        ["tenant_id", "status", "updated_at_ms", "execution_id"],
    )
    op.create_index(
        "ix_executions_flow_status",
        "executions",
        ["tenant_id", "flow_id", "status", "updated_at_ms", "execution_id"],
    )
    op.create_index("ix_executions_expires", "executions", ["expires_at_ms"])

    for table, entry, value in (
        ("execution_nodes", "node_id", "entry"),
        ("execution_vars", "name", "value"),
    ):
        op.create_table(
            table,
            *_execution_key(),
            sa.Column(entry, sa.String(), nullable=False),
            sa.Column(value, sa.Text(), nullable=False),
            sa.ForeignKeyConstraint(
                ["tenant_id", "execution_id"],
                ["executions.tenant_id", "executions.execution_id"],
                name=f"fk_{table}_executions",
                ondelete="CASCADE",
            ),
            sa.PrimaryKeyConstraint("tenant_id", "execution_id", entry, name=f"pk_{table}"),
        )

    op.create_table(
        "leases",
        *_execution_key(),
        sa.Column("generation", sa.BigInteger(), nullable=True),
        sa.Column("holder_id", sa.String(), nullable=True),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "execution_id", name="pk_leases"),
    )
    op.create_table(
        "heartbeats",
        *_execution_key(),
        sa.Column("node_id", sa.String(), nullable=False),
        sa.Column("last_update_ms", sa.BigInteger(), nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "execution_id", name="pk_heartbeats"),
    )
    op.create_index("ix_heartbeats_expires", "heartbeats", ["expires_at_ms"])
    op.create_table(
        "tombstones",
        *_execution_key(),
        sa.Column("document", sa.Text(), nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "execution_id", name="pk_tombstones"),
    )
    op.create_index("ix_tombstones_expires", "tombstones", ["expires_at_ms"])

    op.create_table(
        "flows",
        sa.Column("flow_id", IDENTIFIER, nullable=False),
        sa.Column("version", sa.String(), nullable=False),
        sa.Column("document", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("flow_id", "version", name="pk_flows"),
    )
    op.create_table(
        "flow_latest",
        sa.Column("flow_id", IDENTIFIER, nullable=False),
        sa.Column("version", sa.String(), nullable=False),
        sa.ForeignKeyConstraint(
            ["flow_id", "version"],
            ["flows.flow_id", "flows.version"],
            name="fk_flow_latest_flows",
        ),
        sa.PrimaryKeyConstraint("flow_id", name="pk_flow_latest"),
    )


def downgrade() -> None:
    for table in (
        "flow_latest",
        "flows",
        "tombstones",
        "heartbeats",
        "leases",
        "execution_vars",
        "execution_nodes",
        "executions",
    ):
        op.drop_table(table)
