"""Recall by meaning: owner keys split by scope.

Until this revision a memory's vectors were laid out under one key per owner (`a<agent>`,
`s<subject>`, `r<room>`, `o<organization>`), so an organization's chunks also held its
subject memories (and any agent-scoped memory carrying the organization), which an
organization-wide list does not show and which took places among the few hundred candidates a
search rescores (recall@10 0.72 on the bench's clusters). Now each owner key also names the
memory's scope (`oo<org>`: its organization memories, `os<org>`: its subject memories,
`as<agent>`: the subject memories an agent stored; docs/search.md, "Vector storage"), and a
search reads only the keys of the scopes its audiences admit.

The layout is rebuilt from `memory_vectors`, which is unchanged (nothing is embedded again):
every chunk and tail row is dropped, each vector gets a tail row under each of its new keys, and
every tail of at least 256 vectors of one model is sealed into chunks, as the embedding worker
seals them. Measured at 100,000 memories (bench template, load ~4): 7.5 s on SQLite, 15.7 s
on PostgreSQL, under 100 MB of memory; the layout it builds is the one new writes build.

Revision ID: 0016_vector_scope_keys
Revises: 0015_pages
Create Date: 2026-12-02
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import numpy as np
import sqlalchemy as sa
from alembic import op

revision = "0016_vector_scope_keys"
down_revision = "0015_pages"
branch_labels = None
depends_on = None

CHUNK_ROWS = 256
BATCH = 5_000  # memories read at once when writing the tail rows
OWNERS = (
    ("source_agent_id", "a"),
    ("subject_id", "s"),
    ("chat_room_id", "r"),
    ("organization_id", "o"),
)
SCOPES = {"agent": "a", "subject": "s", "organization": "o"}

memories = sa.table(
    "memories",
    sa.column("pk", sa.BigInteger()),
    sa.column("scope", sa.String()),
    *(sa.column(column, sa.Uuid()) for column, _ in OWNERS),
)
vectors = sa.table(
    "memory_vectors",
    sa.column("memory_pk", sa.BigInteger()),
    sa.column("model", sa.String()),
    sa.column("scale", sa.Float()),
    sa.column("vector", sa.LargeBinary()),
)
tail = sa.table(
    "vector_tail", sa.column("owner", sa.String()), sa.column("memory_pk", sa.BigInteger())
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
)


def _scoped(prefix: str, scope: str, owner: uuid.UUID) -> str:
    return prefix + SCOPES[scope] + owner.hex


def _unscoped(prefix: str, scope: str, owner: uuid.UUID) -> str:  # noqa: ARG001
    return prefix + owner.hex


def upgrade() -> None:
    _rebuild(_scoped)


def downgrade() -> None:
    _rebuild(_unscoped)


def _rebuild(key: Callable[[str, str, uuid.UUID], str]) -> None:
    bind = op.get_bind()
    bind.execute(chunks.delete())
    bind.execute(tail.delete())
    after = -1
    while True:
        rows = bind.execute(
            sa.select(memories.c.pk, memories.c.scope, *(memories.c[c] for c, _ in OWNERS))
            .join(vectors, vectors.c.memory_pk == memories.c.pk)
            .where(memories.c.pk > after)
            .order_by(memories.c.pk)
            .limit(BATCH)
        ).all()
        if not rows:
            break
        bind.execute(
            tail.insert(),
            [
                {"owner": key(prefix, row[1], value), "memory_pk": row[0]}
                for row in rows
                for (_, prefix), value in zip(OWNERS, row[2:], strict=True)
                if value is not None
            ],
        )
        after = rows[-1][0]
    full = bind.execute(
        sa.select(tail.c.owner, vectors.c.model)
        .join(vectors, vectors.c.memory_pk == tail.c.memory_pk)
        .group_by(tail.c.owner, vectors.c.model)
        .having(sa.func.count() >= CHUNK_ROWS)
        .order_by(tail.c.owner, vectors.c.model)
    ).all()
    for owner, model in full:
        _seal(bind, owner, model)


def _seal(bind: sa.Connection, owner: str, model: str) -> None:
    """Every full chunk of `owner`'s tail vectors of `model`, in key order (as `_seal` in
    `mnemos.storage.sql_vectors` makes them; written out here so this revision never changes)."""
    seq = bind.execute(
        sa.select(sa.func.coalesce(sa.func.max(chunks.c.seq), 0)).where(chunks.c.owner == owner)
    ).scalar_one()
    while True:
        rows = bind.execute(
            sa.select(vectors.c.memory_pk, vectors.c.scale, vectors.c.vector)
            .join(tail, tail.c.memory_pk == vectors.c.memory_pk)
            .where(tail.c.owner == owner, vectors.c.model == model)
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
            )
        )
        bind.execute(tail.delete().where(tail.c.owner == owner, tail.c.memory_pk.in_(pks)))
