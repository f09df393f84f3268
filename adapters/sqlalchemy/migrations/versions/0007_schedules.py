"""Cron schedules and the claims of their dues (W22).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies as of this revision (see 0001).
IDENTIFIER = sa.String().with_variant(sa.String(collation="C"), "postgresql")
TENANT = sa.String(64)


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("tenant_id", TENANT, nullable=False),
        sa.Column("schedule_id", IDENTIFIER, nullable=False),
        sa.Column("definition", sa.Text(), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("cursor_ms", sa.BigInteger(), nullable=False),
        sa.Column("last_due_ms", sa.BigInteger(), nullable=True),
        sa.Column("last_execution_id", sa.String(), nullable=True),
        sa.Column("buffered_due_ms", sa.BigInteger(), nullable=True),
        sa.Column("fired", sa.BigInteger(), nullable=False),
        sa.Column("skipped", sa.BigInteger(), nullable=False),
        sa.Column("failed", sa.BigInteger(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "schedule_id", name="pk_schedules"),
    )
    op.create_table(
        "schedule_claims",
        sa.Column("tenant_id", TENANT, nullable=False),
        sa.Column("schedule_id", IDENTIFIER, nullable=False),
        sa.Column("due_ms", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("holder_id", sa.String(), nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "schedule_id"],
            ["schedules.tenant_id", "schedules.schedule_id"],
            name="fk_schedule_claims_schedules",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "schedule_id", "due_ms", name="pk_schedule_claims"),
    )


def downgrade() -> None:
    op.drop_table("schedule_claims")
    op.drop_table("schedules")
