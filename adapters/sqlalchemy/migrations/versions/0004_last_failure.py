"""The last failure of an execution's node, part of its state (ADR 0022).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # JSON text, as the other structured header columns; 'null' for every stored execution.
    with op.batch_alter_table("executions") as batch:
        batch.add_column(
            sa.Column("last_failure", sa.Text(), nullable=False, server_default="null")
        )


def downgrade() -> None:
    with op.batch_alter_table("executions") as batch:
        batch.drop_column("last_failure")
