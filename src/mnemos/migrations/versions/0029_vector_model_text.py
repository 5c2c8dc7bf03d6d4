"""PostgreSQL: a vector's model name is `TEXT` (was `VARCHAR(200)`).

`MNEMOS_EMBEDDER_MODEL` has no length limit and an endpoint's vectors record `name@size`: on
PostgreSQL a name of 197 characters or more made every vector save fail, so that nothing was
ever found by meaning (review23, finding 1). 0026 widens the columns before it appends the
sizes (its UPDATE stopped the upgrade of such names); this widens those of databases that ran
0026 before it did. Widening rewrites no row nor index on PostgreSQL; SQLite does not enforce
the length. Downgrading leaves the columns wide, as a downgrade of 0026 does: the earlier code
reads and writes them as before.

Revision ID: 0029_vector_model_text
Revises: 0028_idempotency_key_memory
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "0029_vector_model_text"
down_revision = "0028_idempotency_key_memory"
branch_labels = None
depends_on = None

TABLES = ("memory_vectors", "vector_chunks")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN model TYPE TEXT")


def downgrade() -> None:
    return None
