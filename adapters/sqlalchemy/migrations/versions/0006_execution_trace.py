"""An execution's trace context, part of its state (C6, ADR 0027).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-09
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # JSON text, as the other structured header columns; 'null' (no trace) for every stored
    # execution, which a worker with tracing on gives a trace at its next step.
    with op.batch_alter_table("executions") as batch:
        batch.add_column(sa.Column("trace", sa.Text(), nullable=False, server_default="null"))


def downgrade() -> None:
    with op.batch_alter_table("executions") as batch:
        batch.drop_column("trace")
