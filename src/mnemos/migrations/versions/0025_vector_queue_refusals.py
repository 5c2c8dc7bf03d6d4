"""A queued memory counts the times the embedder refused its text (`vector_queue.refusals`).

An embeddings endpoint refuses a text longer than its model's context (HTTP 400/413) for the
whole request: such a memory failed every batch it was claimed in, forever, and the other
tenants' memories claimed with it were never embedded (review22, finding 1). The worker now
embeds a refused batch's texts one at a time and counts each refusal against its memory; after
`MAX_REFUSALS` the memory is set aside (never claimed, not in the backlog) until `mnemos
reindex` gives it another try. Adding a column with a constant default rewrites no row on
PostgreSQL (11+) nor SQLite.

Revision ID: 0025_vector_queue_refusals
Revises: 0024_vector_chunk_bits_first
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlite3

import sqlalchemy as sa
from alembic import op

revision = "0025_vector_queue_refusals"
down_revision = "0024_vector_chunk_bits_first"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "vector_queue",
        sa.Column("refusals", sa.SmallInteger(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    # Not through a batch (a copy of the table): SQLite's trigger on `memories` names
    # `vector_queue`, and the copy's rename breaks it. SQLite before 3.35 cannot drop a column:
    # it keeps it (the earlier code never reads it, and it has a default).
    if op.get_bind().dialect.name == "sqlite" and sqlite3.sqlite_version_info < (3, 35):
        return
    op.drop_column("vector_queue", "refusals")
