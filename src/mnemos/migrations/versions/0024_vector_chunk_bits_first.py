"""SQLite: a vector chunk's sign bits come right after its keys, before its int8 vectors.

A search reads each chunk's `pks` and `bits` only. SQLite stores a row's values end to end,
and a chunk (55 KB) runs over a chain of overflow pages, each naming the next: with `bits`
last, reading them walked past the 48 KB of `vectors` first, about 12 more pages per chunk.
Within the mapped part of the file (`mmap_size`) that costs little; past it (a database over
2 GiB, SQLite's largest map here) each page is copied through the connection's small cache,
which the walk also empties. At 1,000,000 memories a one-agent search reads about 80 chunks:
the walk was most of the request's time growth over 100,000 (BENCHMARKS.md, "Semantic search
for one agent at 1,000,000", sem11). With `bits` second, a chunk's read stops after its first
two overflow pages.

The table is made anew with its columns in the new order and the chunks copied (SQLite cannot
move a column): about a minute per million memories' layout. PostgreSQL keeps its table: its
keys and sign bits are in the row (STORAGE MAIN) and its vectors out of line whatever the order.
Downgrading keeps the new order (both read the columns by name).

Revision ID: 0024_vector_chunk_bits_first
Revises: 0023_request_id_length
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024_vector_chunk_bits_first"
down_revision = "0023_request_id_length"
branch_labels = None
depends_on = None

COLUMNS = ("tenant_id", "owner", "seq", "model", "rows", "pks", "bits", "scales", "vectors")


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.create_table(
        "vector_chunks_new",
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(40), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("pks", sa.LargeBinary(), nullable=False),
        sa.Column("bits", sa.LargeBinary(), nullable=False),
        sa.Column("scales", sa.LargeBinary(), nullable=False),
        sa.Column("vectors", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "owner", "seq", name="pk_vector_chunks"),
    )
    names = ", ".join(COLUMNS)
    op.execute(
        f"INSERT INTO vector_chunks_new ({names}) SELECT {names} FROM vector_chunks "
        "ORDER BY tenant_id, owner, seq"
    )
    op.drop_table("vector_chunks")
    op.rename_table("vector_chunks_new", "vector_chunks")


def downgrade() -> None:
    pass  # the columns are read by name: the new order serves the older code as well
