"""Index subject lists by scope too, so "about me" and an organization's subject list are
ordered index walks.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_memories_subject_scope_order", "memories", ["subject_id", "scope", "inserted_at", "id"]
    )
    op.drop_index("ix_memories_subject_order", table_name="memories")


def downgrade() -> None:
    op.create_index("ix_memories_subject_order", "memories", ["subject_id", "inserted_at", "id"])
    op.drop_index("ix_memories_subject_scope_order", table_name="memories")
