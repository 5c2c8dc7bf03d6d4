"""Rows stored before words were cut to 2,047 bytes are indexed as later rows are.

Since review18's finding 8, `domain/search.py` `words_of` cuts each word of a memory's indexed
text (`search_text`) to `MAX_WORD_BYTES` (2,047 bytes: PostgreSQL's `to_tsvector` skips a longer
word) on a character boundary, and a query's words alike. A row stored before keeps the whole
word: on PostgreSQL its `search` tsvector lacks it, so the memory is never found by it; on
SQLite a query's cut word still finds it as a prefix, but not inside a phrase, nor as a whole
word. This migration cuts the words of those rows' `search_text` the same way; each backend's
index follows the column (PostgreSQL's generated `search`; SQLite's trigger `memories_fts_au`).

Only a `search_text` longer than 2,047 bytes can hold such a word: one pass over the table
reads the keys of those rows (PostgreSQL reads a value's length from its header), then their
text is read by key, `BATCH` at a time, and only the rows whose text changes are updated.
Nothing else of the row changes (`updated_at` is the memory's, not its index's), and no history
is written. Downgrading keeps the cut words (the index before was wrong).

The cut is the domain's (`mnemos.domain.search.recut`, which `mnemos import` applies to files
written before it), so that stored and imported rows are indexed alike.

Revision ID: 0025_cut_long_words
Revises: 0024_vector_chunk_bits_first
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from mnemos.domain.search import MAX_WORD_BYTES, recut

revision = "0025_cut_long_words"
down_revision = "0024_vector_chunk_bits_first"
branch_labels = None
depends_on = None

BATCH = 1_000

BYTES = {"postgresql": "octet_length(search_text)", "sqlite": "length(CAST(search_text AS BLOB))"}


def upgrade() -> None:
    conn = op.get_bind()
    long_rows = sa.text(
        f"SELECT tenant_id, pk FROM memories WHERE {BYTES[conn.dialect.name]} > :most"
    )
    keys = [tuple(row) for row in conn.execute(long_rows, {"most": MAX_WORD_BYTES})]
    memories = sa.table(
        "memories", sa.column("tenant_id"), sa.column("pk"), sa.column("search_text")
    )
    key = sa.tuple_(memories.c.tenant_id, memories.c.pk)
    for first in range(0, len(keys), BATCH):
        batch = keys[first : first + BATCH]
        found = conn.execute(
            sa.select(memories.c.tenant_id, memories.c.pk, memories.c.search_text).where(
                key.in_(batch)
            )
        ).all()
        changed = [
            {"t": tenant, "p": pk, "text": cut}
            for tenant, pk, text in found
            if (cut := recut(text)) != text
        ]
        if changed:
            conn.execute(
                memories.update()
                .where(
                    memories.c.tenant_id == sa.bindparam("t"), memories.c.pk == sa.bindparam("p")
                )
                .values(search_text=sa.bindparam("text")),
                changed,
            )


def downgrade() -> None:
    pass  # the cut words stay: the index before them missed those words
