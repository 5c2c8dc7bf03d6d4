"""PostgreSQL: the embedding queue in its claim order.

The embedding worker claims the newest queued memories first (`claim_unembedded`). On
PostgreSQL the queue's primary key leads with the tenant (`0018_tenants`), so that order had no
index: each claim read the whole queue and sorted it, 15-18 ms per batch of 8 at 100,000 queued
(an import, a backfill), growing with the queue. An index on `memory_pk` (the memories' one
sequence) walks it from the newest. SQLite's queue is keyed by `memory_pk` alone (its rowid):
it had the order already.

Revision ID: 0022_vector_queue_order
Revises: 0021_vector_chunks_inline
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

revision = "0022_vector_queue_order"
down_revision = "0021_vector_chunks_inline"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("CREATE INDEX IF NOT EXISTS ix_vector_queue_order ON vector_queue (memory_pk)")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP INDEX IF EXISTS ix_vector_queue_order")
