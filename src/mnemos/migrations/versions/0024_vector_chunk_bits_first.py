"""SQLite: a vector chunk's sign bits come right after its keys, before its int8 vectors.

A search reads each chunk's `pks` and `bits` only. SQLite stores a row's values end to end,
and a chunk (55 KB) runs over a chain of overflow pages, each naming the next: with `bits`
last, reading them walked past the 48 KB of `vectors` first, about 12 more pages per chunk.
Within the mapped part of the file (`mmap_size`) that costs little; past it (a database over
2 GiB, SQLite's largest map here) each page is copied through the connection's small cache.
At 1,000,000 memories a one-agent search reads about 80 chunks, past the map: reading them
took 2.9-3.8 ms of CPU, 1.8-2.0 ms with `bits` second (BENCHMARKS.md, sem11).

The table is made anew with its columns in the new order and the chunks copied (SQLite cannot
move a column): 10.5 s at 1,000,000 memories (load ~4). The old table's pages are left free in
the file for later writes (0.8 GB at 1,000,000; VACUUM gives them back, and takes minutes).
PostgreSQL keeps its table: its keys and sign bits are in the row (STORAGE MAIN) and its
vectors out of line, whatever the order. Downgrading keeps the new order (both read the
columns by name).

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
    # pysqlite commits the CREATE before the copy's transaction: a copy stopped earlier (killed,
    # disk full) left the new table behind, empty of anything that counts.
    op.execute("DROP TABLE IF EXISTS vector_chunks_new")
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
    op.execute("ANALYZE vector_chunks")  # its statistics went with the old table


def downgrade() -> None:
    pass  # the columns are read by name: the new order serves the older code as well
