"""Idempotency keys for store requests.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from mnemos.storage.schema import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "idempotency_keys",
        sa.Column("principal_id", sa.Uuid(), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("memory_id", sa.Uuid(), nullable=False),
        sa.Column("inserted_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("idempotency_keys")
