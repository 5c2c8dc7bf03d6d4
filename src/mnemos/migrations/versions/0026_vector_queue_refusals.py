"""A queued memory counts the times the embedder refused its text (`vector_queue.refusals`).

An embeddings endpoint refuses a text longer than its model's context (HTTP 400/413) for the
whole request: such a memory failed every batch it was claimed in, forever, and the other
tenants' memories claimed with it were never embedded (review22, finding 1). The worker now
embeds a refused batch's texts one at a time and counts each refusal against its memory; after
`MAX_REFUSALS` the memory is set aside (never claimed, not in the backlog) until `mnemos
reindex` gives it another try. Adding a column with a constant default rewrites no row on
PostgreSQL (11+) nor SQLite.

An endpoint's vectors record its model's name with their size (`nomic-embed-text@768`): a name
is often an alias that may come to name a model of another size, whose vectors then counted as
the same model's and made every search by meaning a 500 (review22, finding 3). The vectors an
endpoint stored before get their size added here (every model but the local one, whose name
fixes its size, and names holding an `@` already), so nothing needs embedding again;
downgrading leaves them so (the earlier code then sees another model: `mnemos reindex`).

On PostgreSQL the `model` columns are widened from `VARCHAR(200)` to `TEXT` first (added after
the release, review23 finding 1): a name of 197 to 200 characters with its size no longer fits
200, and the UPDATE stopped the upgrade. Databases that ran this migration before that change
are widened by 0029, which widens these ones again (nothing to do): every upgraded database ends
with the same columns. A wider `VARCHAR` or `TEXT` rewrites no row on PostgreSQL; SQLite does
not enforce the length.

Revision ID: 0026_vector_queue_refusals
Revises: 0025_cut_long_words
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlite3

import sqlalchemy as sa
from alembic import op

revision = "0026_vector_queue_refusals"
down_revision = "0025_cut_long_words"
branch_labels = None
depends_on = None


LOCAL_MODEL = "all-MiniLM-L6-v2-int8"  # mnemos.embedding.local.MODEL, as of this migration


MODEL_TABLES = ("memory_vectors", "vector_chunks")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in MODEL_TABLES:
            op.execute(f"ALTER TABLE {table} ALTER COLUMN model TYPE TEXT")
    op.add_column(
        "vector_queue",
        sa.Column("refusals", sa.SmallInteger(), nullable=False, server_default="0"),
    )
    # One int8 byte per number: a vector's size is its length, a chunk's its length per row.
    sized = {
        "memory_vectors": "length(vector)",
        "vector_chunks": "length(vectors) / rows",
    }
    for table, size in sized.items():
        op.execute(
            sa.text(
                f"UPDATE {table} SET model = model || '@' || CAST({size} AS VARCHAR) "
                "WHERE model != :local AND model NOT LIKE '%@%'"
            ).bindparams(local=LOCAL_MODEL)
        )


def downgrade() -> None:
    # Not through a batch (a copy of the table): SQLite's trigger on `memories` names
    # `vector_queue`, and the copy's rename breaks it. SQLite before 3.35 cannot drop a column:
    # it keeps it (the earlier code never reads it, and it has a default).
    if op.get_bind().dialect.name == "sqlite" and sqlite3.sqlite_version_info < (3, 35):
        return
    op.drop_column("vector_queue", "refusals")
