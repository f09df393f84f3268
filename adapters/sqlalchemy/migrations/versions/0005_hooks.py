"""Inbound webhooks created through the admin API (V10): the ``hooks`` table.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies as of this revision (see 0001).
TENANT = sa.String(64)
IDENTIFIER = sa.String().with_variant(sa.String(collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "hooks",
        sa.Column("name", IDENTIFIER, nullable=False),
        sa.Column("tenant_id", TENANT, nullable=False),
        sa.Column("document", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_hooks"),
    )


def downgrade() -> None:
    op.drop_table("hooks")
