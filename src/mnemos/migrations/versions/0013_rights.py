"""PostgreSQL: `vector_queue` and `memory_vectors` no longer reference `memories` by a foreign key.

Each ON DELETE CASCADE ran once per deleted memory (PostgreSQL's referential triggers are
per row): erasing 30,000 memories spent 1.4 s of its 1.7 s in the two cascades. The one delete
path of memories (`SqlBase._delete_memories`) now deletes their queue entries and vectors by
set, after the memories (so a vector saved by an embedder that locked the memory first is
deleted too; `save_vectors` locks the memories it saves vectors for, so none is saved after).
SQLite keeps its constraints: its cascade is an index lookup that finds nothing by then.

Revision ID: 0013_rights
Revises: 0012_ended_sessions
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0013_rights"
down_revision = "0012_ended_sessions"
branch_labels = None
depends_on = None

CONSTRAINTS = (
    ("memory_vectors", "fk_memory_vectors_memory_pk_memories"),
    ("vector_queue", "fk_vector_queue_memory_pk_memories"),
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, name in CONSTRAINTS:
        op.drop_constraint(name, table, type_="foreignkey")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, name in CONSTRAINTS:
        op.execute(f"DELETE FROM {table} WHERE memory_pk NOT IN (SELECT pk FROM memories)")
        op.create_foreign_key(name, table, "memories", ["memory_pk"], ["pk"], ondelete="CASCADE")
