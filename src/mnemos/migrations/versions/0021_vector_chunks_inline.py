"""Vector chunks of 128 vectors, whose keys and sign bits stay in the row on PostgreSQL.

A search reads each chunk's `pks` and `bits` only (a chunk of 256 vectors: 2 KB + 12 KB). On
PostgreSQL a row over ~2 KB has its large values moved out of line (TOAST), so each chunk read
was a lookup in the TOAST index and several TOAST rows: 20 of the 24 ms of an organization-wide
search at 100,000 memories (bench/search_profile.py). A chunk of 128 (1 KB + 6 KB) with `pks`
and `bits` stored MAIN (compressed when that helps, moved out of line only when the row cannot
fit a page otherwise) keeps them in the heap row; `vectors` (48 KB, read by compaction only)
and `scales` still go out of line, and `owner` (34 bytes, which PostgreSQL moved out of line
too while the row stayed over 2 KB) is stored PLAIN. SQLite has no TOAST: its chunks are split
the same way, so that both backends lay vectors out alike.

Chunks sealed before are split into chunks of at most 128, renumbered per (tenant, owner) in
their order. Downgrading keeps them (the search reads chunks of any size); only the storage
setting goes back.

Revision ID: 0021_vector_chunks_inline
Revises: 0020_owner_statistics
Create Date: 2026-12-02
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0021_vector_chunks_inline"
down_revision = "0020_owner_statistics"
branch_labels = None
depends_on = None

CHUNK_ROWS = 128
EVERY_TENANT = "/* every tenant */"  # the migration serves every tenant (docs/deploying.md)
chunks = sa.table(
    "vector_chunks",
    sa.column("tenant_id", sa.Uuid()),
    sa.column("owner", sa.String()),
    sa.column("seq", sa.Integer()),
    sa.column("model", sa.String()),
    sa.column("rows", sa.Integer()),
    sa.column("pks", sa.LargeBinary()),
    sa.column("scales", sa.LargeBinary()),
    sa.column("vectors", sa.LargeBinary()),
    sa.column("bits", sa.LargeBinary()),
)
C = chunks.c
BLOBS = ("pks", "scales", "vectors", "bits")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute(
            "ALTER TABLE vector_chunks ALTER COLUMN pks SET STORAGE MAIN, "
            "ALTER COLUMN bits SET STORAGE MAIN, ALTER COLUMN owner SET STORAGE PLAIN"
        )
    owners = bind.execute(
        sa.select(C.tenant_id, C.owner)
        .prefix_with(EVERY_TENANT)
        .where(C.rows > CHUNK_ROWS)
        .distinct()
        .order_by(C.tenant_id, C.owner)
    ).all()
    for tenant, owner in owners:
        _split(bind, tenant, owner)


def _split(bind: Any, tenant: Any, owner: str) -> None:
    """Rewrite one (tenant, owner)'s chunks as chunks of at most `CHUNK_ROWS`, in order."""
    this = (C.tenant_id == tenant, C.owner == owner)
    rows = bind.execute(
        sa.select(C.model, C.rows, *(C[name] for name in BLOBS)).where(*this).order_by(C.seq)
    ).all()
    bind.execute(chunks.delete().where(*this))
    made: list[dict[str, Any]] = []
    for model, count, *blobs in rows:
        widths = [len(bytes(blob)) // count for blob in blobs]
        for start in range(0, count, CHUNK_ROWS):
            end = min(count, start + CHUNK_ROWS)
            made.append(
                {
                    "tenant_id": tenant,
                    "owner": owner,
                    "seq": len(made) + 1,
                    "model": model,
                    "rows": end - start,
                    **{
                        name: bytes(blob)[start * width : end * width]
                        for name, blob, width in zip(BLOBS, blobs, widths, strict=True)
                    },
                }
            )
    bind.execute(chunks.insert(), made)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "ALTER TABLE vector_chunks ALTER COLUMN pks SET STORAGE EXTENDED, "
            "ALTER COLUMN bits SET STORAGE EXTENDED, ALTER COLUMN owner SET STORAGE EXTENDED"
        )
