"""People's rights: the history of every change of a memory, erasure events, retention.

Revision ID: 0011_history
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from mnemos.storage.schema import PK, UTCDateTime

revision = "0011_history"
down_revision = "0010_vectors"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memory_history",
        sa.Column("pk", PK, primary_key=True, autoincrement=True),
        sa.Column("memory_id", sa.Uuid(), nullable=False),
        sa.Column("subject_id", sa.Uuid(), nullable=True),
        sa.Column("event", sa.String(16), nullable=False),
        sa.Column("actor_type", sa.String(16), nullable=False),
        sa.Column("actor_id", sa.String(64), nullable=True),
        sa.Column("request_id", sa.String(64), nullable=True),
        sa.Column("superseded_by", sa.Uuid(), nullable=True),
        sa.Column("at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_memory_history_memory", "memory_history", ["memory_id", "pk"])
    op.create_index("ix_memory_history_subject_id", "memory_history", ["subject_id"])
    op.create_table(
        "erasures",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("subject_id", sa.Uuid(), nullable=False),
        sa.Column("actor_type", sa.String(16), nullable=False),
        sa.Column("actor_id", sa.String(64), nullable=True),
        sa.Column("request_id", sa.String(64), nullable=True),
        sa.Column("erased", sa.Integer(), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_erasures_subject_id", "erasures", ["subject_id"])
    op.create_table(
        "retention_policies",
        sa.Column(
            "organization_id",
            sa.Uuid(),
            sa.ForeignKey(
                "organizations.id",
                ondelete="CASCADE",
                name="fk_retention_policies_organization_id_organizations",
            ),
            primary_key=True,
        ),
        sa.Column("system", sa.String(16), primary_key=True),
        sa.Column("days", sa.Integer(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("retention_policies")
    op.drop_table("erasures")
    op.drop_table("memory_history")
