"""Recall by meaning, shard-ready: the four vector tables name their memory's tenant.

`memory_vectors` and `vector_queue` gain `tenant_id` (their memory's, copied from `memories`;
a row whose memory is gone is dropped), which leads their keys: `(tenant_id, memory_pk)`, the
primary key on PostgreSQL; on SQLite `memory_pk` stays the key (its foreign key to `memories`
cascades) and the pair is a unique index, as migration 0018 did for `memories`. The queue's
triggers copy the new memory's tenant.

The search layout is laid out per tenant and owner: a chunk keyed by owner alone could mix
tenants (a room's or a subject's memories stored by agents of several organizations). So
`vector_tail` (key `(tenant_id, owner, memory_pk)`, its foreign key to `memory_vectors` by
`(tenant_id, memory_pk)`) and `vector_chunks` (key `(tenant_id, owner, seq)`) are made anew
and rebuilt from `memory_vectors`, as migration 0016 rebuilt them: every vector gets a tail row
under each of its owner keys within its tenant, and every tail of at least 256 vectors of one
model is sealed into chunks as the embedding worker seals them. Nothing is embedded again.

Revision ID: 0019_vector_tenants
Revises: 0018_tenants
Create Date: 2026-12-02
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import sqlalchemy as sa
from alembic import op

revision = "0019_vector_tenants"
down_revision = "0018_tenants"
branch_labels = None
depends_on = None

PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
CHUNK_ROWS = 256
BATCH = 5_000  # memories read at once when writing the tail rows
OWNERS = (
    ("source_agent_id", "a"),
    ("subject_id", "s"),
    ("chat_room_id", "r"),
    ("organization_id", "o"),
)
SCOPES = {"agent": "a", "subject": "s", "organization": "o"}
KEYED = ("memory_vectors", "vector_queue")
# Each row's tenant from its memory: on PostgreSQL by one join (`memories.pk` alone has no
# index there since 0018: a correlated lookup would scan `memories` once per row), on SQLite by
# rowid.
BACKFILL = {
    True: "UPDATE {table} SET tenant_id = m.tenant_id FROM memories m "
    "WHERE m.pk = {table}.memory_pk",
    False: "UPDATE {table} SET tenant_id = (SELECT m.tenant_id FROM memories m "
    "WHERE m.pk = {table}.memory_pk)",
}
POSTGRES_QUEUE = (
    "CREATE OR REPLACE FUNCTION mnemos_queue_vector() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "BEGIN INSERT INTO vector_queue({columns}) VALUES ({values}); RETURN NULL; END $$"
)
SQLITE_QUEUE = (
    "CREATE TRIGGER memories_vector_queue AFTER INSERT ON memories BEGIN "
    "INSERT INTO vector_queue({columns}) VALUES ({values}); END"
)

memories = sa.table(
    "memories",
    sa.column("pk", sa.BigInteger()),
    sa.column("tenant_id", sa.Uuid()),
    sa.column("scope", sa.String()),
    *(sa.column(column, sa.Uuid()) for column, _ in OWNERS),
)


def _tables(tenants: bool) -> tuple[Any, Any, Any]:
    """`memory_vectors`, `vector_tail` and `vector_chunks` as this revision reads and writes
    them, with or without their tenant."""

    def extra() -> list[Any]:
        return [sa.column("tenant_id", sa.Uuid())] if tenants else []

    vectors = sa.table(
        "memory_vectors",
        sa.column("memory_pk", sa.BigInteger()),
        sa.column("model", sa.String()),
        sa.column("scale", sa.Float()),
        sa.column("vector", sa.LargeBinary()),
        *extra(),
    )
    tail = sa.table(
        "vector_tail",
        sa.column("owner", sa.String()),
        sa.column("memory_pk", sa.BigInteger()),
        *extra(),
    )
    chunks = sa.table(
        "vector_chunks",
        sa.column("owner", sa.String()),
        sa.column("seq", sa.Integer()),
        sa.column("model", sa.String()),
        sa.column("rows", sa.Integer()),
        sa.column("pks", sa.LargeBinary()),
        sa.column("scales", sa.LargeBinary()),
        sa.column("vectors", sa.LargeBinary()),
        sa.column("bits", sa.LargeBinary()),
        *extra(),
    )
    return vectors, tail, chunks


def upgrade() -> None:
    bind = op.get_bind()
    postgres = bind.dialect.name == "postgresql"
    if not postgres:
        op.execute("DROP TRIGGER memories_vector_queue")  # a table rebuild below breaks it
    op.drop_table("vector_chunks")
    op.drop_table("vector_tail")
    for table in KEYED:
        op.add_column(table, sa.Column("tenant_id", sa.Uuid(), nullable=True))
        op.execute(BACKFILL[postgres].format(table=table))
        op.execute(f"DELETE FROM {table} WHERE tenant_id IS NULL")  # its memory is gone
        if postgres:
            op.alter_column(table, "tenant_id", nullable=False)
            op.drop_constraint(f"pk_{table}", table, type_="primary")
            op.create_primary_key(f"pk_{table}", table, ["tenant_id", "memory_pk"])
        else:
            with op.batch_alter_table(table) as batch:
                batch.alter_column("tenant_id", nullable=False)
            op.create_index(
                f"uq_{table}_tenant_key", table, ["tenant_id", "memory_pk"], unique=True
            )
    _create_layout(postgres, tenants=True)
    _queue_trigger(postgres, ("tenant_id", "memory_pk"), ("NEW.tenant_id", "NEW.pk"))
    _rebuild(tenants=True)


def downgrade() -> None:
    bind = op.get_bind()
    postgres = bind.dialect.name == "postgresql"
    if not postgres:
        op.execute("DROP TRIGGER memories_vector_queue")
    op.drop_table("vector_chunks")
    op.drop_table("vector_tail")
    for table in KEYED:
        if postgres:
            op.drop_constraint(f"pk_{table}", table, type_="primary")
            op.create_primary_key(f"pk_{table}", table, ["memory_pk"])
        else:
            op.drop_index(f"uq_{table}_tenant_key", table)
        with op.batch_alter_table(table) as batch:
            batch.drop_column("tenant_id")
    _create_layout(postgres, tenants=False)
    _queue_trigger(postgres, ("memory_pk",), ("NEW.pk",))
    _rebuild(tenants=False)


def _create_layout(postgres: bool, tenants: bool) -> None:
    """`vector_tail` and `vector_chunks`, empty, keyed with or without the tenant."""

    def lead() -> list[sa.Column[Any]]:
        return [sa.Column("tenant_id", sa.Uuid(), nullable=False)] if tenants else []

    first = ["tenant_id"] if tenants else []
    op.create_table(
        "vector_tail",
        *lead(),
        sa.Column("owner", sa.String(40), nullable=False),
        sa.Column("memory_pk", PK, nullable=False),
        sa.ForeignKeyConstraint(
            [*first, "memory_pk"],
            [f"memory_vectors.{column}" for column in [*first, "memory_pk"]],
            ondelete="CASCADE",
            name="fk_vector_tail_memory_pk_memory_vectors",
        ),
        sa.PrimaryKeyConstraint(*first, "owner", "memory_pk", name="pk_vector_tail"),
    )
    op.create_index("ix_vector_tail_memory_pk", "vector_tail", [*first, "memory_pk"])
    op.create_table(
        "vector_chunks",
        *lead(),
        sa.Column("owner", sa.String(40), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("pks", sa.LargeBinary(), nullable=False),
        sa.Column("scales", sa.LargeBinary(), nullable=False),
        sa.Column("vectors", sa.LargeBinary(), nullable=False),
        sa.Column("bits", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint(*first, "owner", "seq", name="pk_vector_chunks"),
    )
    if postgres:
        # Vectors and their sign bits are random bytes: compressing them only costs time.
        for column in ("vectors", "bits"):
            op.execute(f"ALTER TABLE vector_chunks ALTER COLUMN {column} SET STORAGE EXTERNAL")


def _queue_trigger(postgres: bool, columns: tuple[str, ...], values: tuple[str, ...]) -> None:
    text = {"columns": ", ".join(columns), "values": ", ".join(values)}
    op.execute((POSTGRES_QUEUE if postgres else SQLITE_QUEUE).format(**text))


def _rebuild(tenants: bool) -> None:
    """Every vector's tail rows under its owner keys (within its tenant), then every full tail
    sealed (as `mnemos.storage.sql_vectors` lays them out; written out here so this revision
    never changes)."""
    bind = op.get_bind()
    vectors, tail, chunks = _tables(tenants)
    # Walked in the order of `memory_vectors`' key, each joined to its memory by its key (with
    # the tenant, the primary key of both on PostgreSQL).
    if tenants:
        key = [vectors.c.tenant_id, vectors.c.memory_pk]
        joined = sa.and_(
            memories.c.tenant_id == vectors.c.tenant_id, memories.c.pk == vectors.c.memory_pk
        )
    else:
        key = [vectors.c.memory_pk]
        joined = memories.c.pk == vectors.c.memory_pk
    after: tuple[Any, ...] | None = None
    while True:
        rows = bind.execute(
            sa.select(
                memories.c.pk,
                memories.c.tenant_id,
                memories.c.scope,
                *(memories.c[c] for c, _ in OWNERS),
                *key,
            )
            .select_from(vectors.join(memories, joined))
            .where(sa.true() if after is None else sa.tuple_(*key) > sa.tuple_(*after))
            .order_by(*key)
            .limit(BATCH)
        ).all()
        if not rows:
            break
        bind.execute(
            tail.insert(),
            [
                {
                    "owner": prefix + SCOPES[row[2]] + value.hex,
                    "memory_pk": row[0],
                    **({"tenant_id": row[1]} if tenants else {}),
                }
                for row in rows
                for (_, prefix), value in zip(OWNERS, row[3 : 3 + len(OWNERS)], strict=True)
                if value is not None
            ],
        )
        after = tuple(rows[-1][-len(key) :])
    lead = [tail.c.tenant_id] if tenants else []
    full = bind.execute(
        sa.select(*lead, tail.c.owner, vectors.c.model)
        .join(vectors, _tail_join(vectors, tail, tenants))
        .group_by(*lead, tail.c.owner, vectors.c.model)
        .having(sa.func.count() >= CHUNK_ROWS)
        .order_by(*lead, tail.c.owner, vectors.c.model)
    ).all()
    for found in full:
        tenant = found[0] if tenants else None
        _seal(bind, (vectors, tail, chunks), tenant, found[-2], found[-1])


def _tail_join(vectors: Any, tail: Any, tenants: bool) -> sa.ColumnElement[bool]:
    """A tail row's vector, by `memory_vectors`' key: with the tenant on PostgreSQL, where it
    leads the key; by `memory_pk` alone on SQLite, where that is the rowid
    (3x faster at 100,000)."""
    joined: sa.ColumnElement[bool] = vectors.c.memory_pk == tail.c.memory_pk
    if tenants and op.get_bind().dialect.name == "postgresql":
        return sa.and_(vectors.c.tenant_id == tail.c.tenant_id, joined)
    return joined


def _seal(
    bind: sa.Connection,
    tables: tuple[Any, Any, Any],
    tenant: uuid.UUID | None,
    owner: str,
    model: str,
) -> None:
    """Every full chunk of one owner's tail vectors of `model` (in `tenant`), in key order."""
    vectors, tail, chunks = tables
    mine = [tail.c.owner == owner]
    theirs = [chunks.c.owner == owner]
    if tenant is not None:
        mine.append(tail.c.tenant_id == tenant)
        theirs.append(chunks.c.tenant_id == tenant)
    seq = bind.execute(
        sa.select(sa.func.coalesce(sa.func.max(chunks.c.seq), 0)).where(*theirs)
    ).scalar_one()
    while True:
        rows = bind.execute(
            sa.select(vectors.c.memory_pk, vectors.c.scale, vectors.c.vector)
            .join(tail, _tail_join(vectors, tail, tenant is not None))
            .where(*mine, vectors.c.model == model)
            .order_by(vectors.c.memory_pk)
            .limit(CHUNK_ROWS)
        ).all()
        if len(rows) < CHUNK_ROWS:
            return
        seq += 1
        pks = [row[0] for row in rows]
        blob = b"".join(bytes(row[2]) for row in rows)
        matrix = np.frombuffer(blob, dtype=np.int8).reshape(len(rows), -1)
        bind.execute(
            chunks.insert().values(
                owner=owner,
                seq=seq,
                model=model,
                rows=len(rows),
                pks=np.asarray(pks, dtype="<i8").tobytes(),
                scales=np.asarray([row[1] for row in rows], dtype="<f4").tobytes(),
                vectors=blob,
                bits=np.packbits(matrix > 0, axis=1).tobytes(),
                **({"tenant_id": tenant} if tenant is not None else {}),
            )
        )
        bind.execute(tail.delete().where(*mine, tail.c.memory_pk.in_(pks)))
