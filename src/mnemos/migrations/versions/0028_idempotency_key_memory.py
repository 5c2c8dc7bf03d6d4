"""An erasure finds the idempotency keys of the memories it deletes through an index.

An erasure deletes the keys of the person's memories (a key's fingerprint is a digest of the
request, content included) by `(tenant_id, memory_id)`; with no index on `memory_id` each of
its deletes read every key of the person's tenants (fixrace20's notes). This index makes each a
lookup per memory.

Revision ID: 0028_idempotency_key_memory
Revises: 0027_idempotency_key_sweep
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "0028_idempotency_key_memory"
down_revision = "0027_idempotency_key_sweep"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_idempotency_keys_memory", "idempotency_keys", ["tenant_id", "memory_id"])


def downgrade() -> None:
    op.drop_index("ix_idempotency_keys_memory", table_name="idempotency_keys")
