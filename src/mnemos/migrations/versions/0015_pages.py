"""The ordered answers of searches being paged: `search_pages`, so later pages neither repeat
nor skip (docs/decisions.md, "Paging a search from its first answer").

Revision ID: 0015_pages
Revises: 0014_vector_bits
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from mnemos.storage.schema import UTCDateTime

revision = "0015_pages"
down_revision = "0014_vector_bits"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "search_pages",
        sa.Column("search_id", sa.String(64), primary_key=True),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("ranked", sa.LargeBinary(), nullable=False),
    )
    op.create_index("ix_search_pages_expires_at", "search_pages", ["expires_at"])


def downgrade() -> None:
    op.drop_table("search_pages")
