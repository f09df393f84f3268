"""The execution history: one row per entry, removed with its execution.

Revision ID: 0003
Revises: 0002
Create Date: 2025-08-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies as of this revision (see 0001).
IDENTIFIER = sa.String().with_variant(sa.String(collation="C"), "postgresql")
TENANT = sa.String(64)


def upgrade() -> None:
    op.create_table(
        "execution_history",
        sa.Column("tenant_id", TENANT, nullable=False),
        sa.Column("execution_id", IDENTIFIER, nullable=False),
        sa.Column("seq", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("entry", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "execution_id"],
            ["executions.tenant_id", "executions.execution_id"],
            name="fk_execution_history_executions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "execution_id", "seq", name="pk_execution_history"),
    )


def downgrade() -> None:
    op.drop_table("execution_history")
