"""The execution that started an execution as its child (E13, E14) and the branches of its
open parallel node (E12), part of its state.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # JSON text, as the other structured header columns: started by no parent ('null') for
    # every stored execution, and no open fork ('null').
    with op.batch_alter_table("executions") as batch:
        batch.add_column(sa.Column("parent", sa.Text(), nullable=False, server_default="null"))
        batch.add_column(sa.Column("fork", sa.Text(), nullable=False, server_default="null"))


def downgrade() -> None:
    with op.batch_alter_table("executions") as batch:
        batch.drop_column("fork")
        batch.drop_column("parent")
