"""Recall by meaning: the sign bits of every sealed chunk's vectors, for the search's first pass.

`vector_chunks.bits` holds one bit per vector component (set where it is positive), packed 8 to
a byte in the chunk's row order: 48 bytes a vector at 384 dimensions, 8x less for a search to
read than the int8 vectors (docs/search.md, "Vector storage"). Chunks sealed before this
revision get theirs here, computed from their int8 vectors, a batch of chunks at a time.

Revision ID: 0014_vector_bits
Revises: 0013_rights
Create Date: 2026-12-02
"""

from __future__ import annotations

import numpy as np
import sqlalchemy as sa
from alembic import op

revision = "0014_vector_bits"
down_revision = "0013_rights"
branch_labels = None
depends_on = None

BATCH = 200  # chunks read and rewritten at once (~20 MB of int8 vectors)


def upgrade() -> None:
    bind = op.get_bind()
    # Added with an empty default so existing rows are valid at once; every row is filled below.
    empty = sa.text("''" if bind.dialect.name == "postgresql" else "X''")
    op.add_column(
        "vector_chunks", sa.Column("bits", sa.LargeBinary(), nullable=False, server_default=empty)
    )
    if bind.dialect.name == "postgresql":
        op.execute("ALTER TABLE vector_chunks ALTER COLUMN bits DROP DEFAULT")
        # Sign bits are random bytes: compressing them only costs time.
        op.execute("ALTER TABLE vector_chunks ALTER COLUMN bits SET STORAGE EXTERNAL")
    chunks = sa.table(
        "vector_chunks",
        sa.column("owner", sa.String()),
        sa.column("seq", sa.Integer()),
        sa.column("rows", sa.Integer()),
        sa.column("vectors", sa.LargeBinary()),
        sa.column("bits", sa.LargeBinary()),
    )
    after: tuple[str, int] | None = None
    while True:
        position = (
            sa.true()
            if after is None
            else sa.tuple_(chunks.c.owner, chunks.c.seq) > sa.tuple_(*after)
        )
        rows = bind.execute(
            sa.select(chunks.c.owner, chunks.c.seq, chunks.c.rows, chunks.c.vectors)
            .where(position)
            .order_by(chunks.c.owner, chunks.c.seq)
            .limit(BATCH)
        ).all()
        if not rows:
            break
        bind.execute(
            chunks.update()
            .where(chunks.c.owner == sa.bindparam("o"), chunks.c.seq == sa.bindparam("s"))
            .values(bits=sa.bindparam("b")),
            [
                {"o": owner, "s": seq, "b": _bits(bytes(blob), count)}
                for owner, seq, count, blob in rows
            ],
        )
        after = (rows[-1][0], rows[-1][1])


def _bits(vectors: bytes, rows: int) -> bytes:
    """The packed sign bits of `rows` int8 vectors stored end to end (as `sign_bits` makes them
    in `mnemos.storage.vector_codes`, written out here so this revision never changes)."""
    matrix = np.frombuffer(vectors, dtype=np.int8).reshape(rows, -1)
    return bytes(np.packbits(matrix > 0, axis=1).tobytes())


def downgrade() -> None:
    with op.batch_alter_table("vector_chunks") as batch:
        batch.drop_column("bits")
