"""Idempotency keys past their day are forgotten by the server's periodic pass, oldest first.

A key answers retries for a day (`IDEMPOTENCY_TTL`) but was deleted only when its own key was
used again, so the keys of requests never retried were kept for good. The retention pass
(`RetentionService.sweep`) now deletes them in batches, oldest first, through this index.

Revision ID: 0027_idempotency_key_sweep
Revises: 0026_vector_queue_refusals
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "0027_idempotency_key_sweep"
down_revision = "0026_vector_queue_refusals"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_idempotency_keys_inserted_at", "idempotency_keys", ["inserted_at"])


def downgrade() -> None:
    op.drop_index("ix_idempotency_keys_inserted_at", table_name="idempotency_keys")
