"""Kept search answers name who searched: each caller keeps a bounded number of them, so one
caller cannot fill the disk with answers kept for 30 minutes (docs/decisions.md, "Paging a
search from its first answer").

Revision ID: 0017_search_owner
Revises: 0016_vector_scope_keys
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_search_owner"
down_revision = "0016_vector_scope_keys"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Kept answers are a cache of 30 minutes: those of the running servers lose their owner
    # (""), which owns no new ones, and expire as before.
    with op.batch_alter_table("search_pages") as batch:
        batch.add_column(sa.Column("owner", sa.String(64), nullable=False, server_default=""))
    op.create_index("ix_search_pages_owner", "search_pages", ["owner", "expires_at"])


def downgrade() -> None:
    op.drop_index("ix_search_pages_owner", "search_pages")
    with op.batch_alter_table("search_pages") as batch:
        batch.drop_column("owner")
