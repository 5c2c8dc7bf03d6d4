"""Read replicas: `write_marks`, the WAL position each tenant's reads must see.

On PostgreSQL an unlogged table (written once per write when replicas are configured: no WAL, no
fsync, not replicated); on SQLite an ordinary table that stays empty (SQLite has no replicas).

Revision ID: 0009_write_marks
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_write_marks"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    unlogged = ["UNLOGGED"] if op.get_bind().dialect.name == "postgresql" else []
    op.create_table(
        "write_marks",
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("lsn", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", name="pk_write_marks"),
        prefixes=unlogged,
    )


def downgrade() -> None:
    op.drop_table("write_marks")
