"""Recall by meaning: memory vectors, the queue of memories to embed, per-owner vector chunks.

`memory_vectors` holds each memory's int8 vector and the model that made it; `vector_queue`
holds the memories still to embed, filled by a trigger in the transaction that inserts the
memory (so a memory acknowledged to its writer is never lost to the embedder, whatever happens
to the process); `vector_tail` and `vector_chunks` are the per-owner search layout
(docs/search.md). Memories stored before this revision are queued here; `mnemos reindex` (or
any running server) embeds them.

Revision ID: 0010_vectors
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_vectors"
down_revision = "0009_write_marks"
branch_labels = None
depends_on = None

PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "memory_vectors",
        sa.Column(
            "memory_pk",
            PK,
            sa.ForeignKey(
                "memories.pk", ondelete="CASCADE", name="fk_memory_vectors_memory_pk_memories"
            ),
            primary_key=True,
        ),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("scale", sa.Float(), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("memory_pk", name="pk_memory_vectors"),
    )
    op.create_table(
        "vector_queue",
        sa.Column(
            "memory_pk",
            PK,
            sa.ForeignKey(
                "memories.pk", ondelete="CASCADE", name="fk_vector_queue_memory_pk_memories"
            ),
            primary_key=True,
        ),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("memory_pk", name="pk_vector_queue"),
    )
    op.create_table(
        "vector_tail",
        sa.Column("owner", sa.String(40), nullable=False),
        sa.Column(
            "memory_pk",
            PK,
            sa.ForeignKey(
                "memory_vectors.memory_pk",
                ondelete="CASCADE",
                name="fk_vector_tail_memory_pk_memory_vectors",
            ),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("owner", "memory_pk", name="pk_vector_tail"),
    )
    op.create_index("ix_vector_tail_memory_pk", "vector_tail", ["memory_pk"])
    op.create_table(
        "vector_chunks",
        sa.Column("owner", sa.String(40), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("pks", sa.LargeBinary(), nullable=False),
        sa.Column("scales", sa.LargeBinary(), nullable=False),
        sa.Column("vectors", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("owner", "seq", name="pk_vector_chunks"),
    )
    if op.get_bind().dialect.name == "postgresql":
        # Vectors are random bytes: compressing them only costs time.
        for table, column in (("memory_vectors", "vector"), ("vector_chunks", "vectors")):
            op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET STORAGE EXTERNAL")
        op.execute(
            "CREATE FUNCTION mnemos_queue_vector() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN INSERT INTO vector_queue(memory_pk) VALUES (NEW.pk); RETURN NULL; END $$"
        )
        op.execute(
            "CREATE TRIGGER memories_vector_queue AFTER INSERT ON memories "
            "FOR EACH ROW EXECUTE FUNCTION mnemos_queue_vector()"
        )
    else:
        op.execute(
            "CREATE TRIGGER memories_vector_queue AFTER INSERT ON memories BEGIN "
            "INSERT INTO vector_queue(memory_pk) VALUES (new.pk); END"
        )
    op.execute("INSERT INTO vector_queue(memory_pk) SELECT pk FROM memories")


def downgrade() -> None:
    op.execute(
        "DROP TRIGGER IF EXISTS memories_vector_queue"
        + (" ON memories" if op.get_bind().dialect.name == "postgresql" else "")
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS mnemos_queue_vector()")
    for table in ("vector_chunks", "vector_tail", "vector_queue", "memory_vectors"):
        op.drop_table(table)
