"""Memory vectors in SQL: the embedding queue, int8 vectors, per-owner chunks, a sign-bit
first pass and exact int8 rescoring.

Layout (docs/search.md, "Vector storage"): each memory's vector is kept once in
`memory_vectors` (int8, with the scale that turns it back into a unit vector) and, for the
search, once per owner the memory has (its agent, organization, subject, room) within the
memory's tenant: first as a row of the (tenant, owner)'s `vector_tail`, then, once the tail
holds `CHUNK_ROWS` vectors, sealed into one `vector_chunks` row (blobs: primary keys, scales,
int8 vectors, and the vectors' sign bits); a chunk never mixes tenants. A
search reads only the keys and sign bits of the owners' chunks (48 bytes a vector) and their
tails, ranks them by Hamming distance to the query's sign bits and the closest few thousand of
those by the query's dot product with their signs (`vector_codes.first_pass`), scores the best
`RESCORE` exactly from `memory_vectors`, and asks the database which of those the query returns:
the layout only narrows the candidates, it never decides visibility. A memory deleted or
changed since its chunk was sealed stays in it and is dropped by that check, until the idle
sweep (or an erasure, at once) rewrites the chunk without it.
"""

from __future__ import annotations

import abc
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray
from sqlalchemy.engine import Connection

from mnemos.domain.ids import utcnow
from mnemos.domain.models import Scope
from mnemos.domain.queries import Audience, MemoryQuery
from mnemos.domain.search import Scored
from mnemos.storage.queue_claims import (
    FREE,
    MAX_REFUSALS,
    NEWEST,
    ROUND_TENANTS,
    TENANT_WALK,
    WAITING,
    Queued,
    fair_batch,
    newest_of,
)
from mnemos.storage.schema import (
    agents,
    chat_participants,
    memories,
    memory_vectors,
    vector_chunks,
    vector_queue,
    vector_tail,
)
from mnemos.storage.sql_base import EVERY_TENANT, SqlBase
from mnemos.storage.sql_conditions import OWNERS, tenants_of
from mnemos.storage.vector_codes import (
    best,
    first_pass,
    int8_scores,
    quantize,
    sign_bits,
)

M = memories.c
V = memory_vectors.c
Q = vector_queue.c
T = vector_tail.c
C = vector_chunks.c

CHUNK_ROWS = 128
"""Vectors per sealed chunk: its keys and sign bits (1 KB + 6 KB) stay in the row on PostgreSQL
(stored MAIN, migration 0021), where 256 (2 KB + 12 KB) went out of line to TOAST, a lookup
and several TOAST rows per chunk read."""
RESCORE = 400
"""How many of a scope's vectors closest by sign bits are scored exactly (at least; more for a
large `limit`). Measured (docs/search.md, bench/bit_recall.py): recall@10 against exact search
>= 0.95 at 10,000 and 100,000 vectors of real MiniLM embeddings; each one costs a key lookup."""
MIN_PASSED = 0.5
"""When fewer than this share of the rescored candidates asked about pass the query's filters,
the search ranks again among only the memories the query holds (its filters keep few of the
owners')."""
OWNER_COLUMNS = tuple(zip(OWNERS, ("a", "s", "r", "o"), strict=True))
"""Each owner column of a memory (`sql_conditions.OWNERS`, narrowest first) and the prefix of
its owner key."""
SCOPE_LETTERS = {Scope.AGENT: "a", Scope.SUBJECT: "s", Scope.ORGANIZATION: "o"}
"""The letter of a memory's scope in its owner keys."""


def owner_key(prefix: str, scope: Scope, owner: uuid.UUID) -> str:
    """The key of one owner's vectors of one scope: `oo<org>` holds the organization-scoped
    memories of an organization, `os<org>` its subject memories, `as<agent>` the subject
    memories an agent stored. Split by scope so that an audience reads only vectors of the
    scopes it admits (an org-wide list reads no subject memory, a person's agents' branch no
    organization memory)."""
    return prefix + SCOPE_LETTERS[scope] + owner.hex


def owner_keys(scope: str | Scope, owners: Sequence[uuid.UUID | None]) -> list[str]:
    """The owner keys of a memory of `scope` whose owner columns (in `OWNER_COLUMNS` order)
    hold `owners`."""
    kind = Scope(scope)
    return [
        owner_key(prefix, kind, value)
        for (_, prefix), value in zip(OWNER_COLUMNS, owners, strict=True)
        if value is not None
    ]


Layout = tuple[uuid.UUID, str]
"""One part of the search layout: a tenant and an owner key (`owner_key`)."""


class VectorsSql(SqlBase):
    """The `VectorStore` port over SQL (both backends: blobs, no extension).

    Every row of the vector tables names its memory's tenant (migration 0019) and every
    statement of them filters by it. The embedding worker, a reindex and the compaction sweep
    serve every tenant: their scans (of the queue, of `memories` by id or key, of the chunks)
    are marked `EVERY_TENANT` (docs/deploying.md, "Multi-shard queries"), and what they then
    change they change by tenant. A search reads the chunks and tails of its audiences'
    tenants."""

    @abc.abstractmethod
    def _checked(
        self, query: MemoryQuery, with_ids: bool, candidates: bool = True
    ) -> tuple[sa.Select[Any], dict[str, Any]]:
        """The query's audiences and filters as one statement over the memories whose pk is in
        the bound `candidates` (unless `candidates` is False: all of them), selecting
        `(pk, id)` (`with_ids`) or the pk."""

    # --- the queue -------------------------------------------------------------------------

    _round_after: uuid.UUID | None = None
    """The last tenant the previous claim's round reached (this process's; a hint: a race of
    two threads only repeats or skips a place)."""

    def claim_unembedded(self, limit: int, lease: timedelta) -> list[tuple[uuid.UUID, str]]:
        now = utcnow()
        # Shared between tenants (docs/decisions.md, "The embedding worker shares its time
        # between tenants"): the batch's first place is the newest queued memory (whoever's: in a
        # quiet system a memory just stored is embedded next), the others go round the tenants
        # with queued memories from where the last claim stopped, each tenant's newest first,
        # and places left over to the newest (`fair_batch`). A tenant that stores faster than
        # the worker embeds thus never holds another's memory back for more than a round.
        # PostgreSQL walks `ix_vector_queue_order` (migration 0022) for the newest, SQLite its
        # rowid; both walk the queue's (tenant_id, memory_pk) key for the round.
        with self._read() as conn:
            newest: list[Queued] = [
                (row[0], row[1]) for row in conn.execute(NEWEST, {"now": now, "limit": limit})
            ]
            if not newest:
                return []
            turn = self._next_tenants(conn, min(limit - 1, ROUND_TENANTS))
            shares: list[Queued] = []
            if turn:
                share = -(-(limit - 1) // len(turn))
                bound = {f"t{i}": tenant for i, tenant in enumerate(turn)}
                found = conn.execute(newest_of(len(turn)), {**bound, "now": now, "share": share})
                shares = [(row[0], row[1]) for row in found]
        waiting = fair_batch(newest, turn, shares, limit)
        tenants = sorted({tenant for tenant, _ in waiting})
        # A claim lost to a crash leaves the memory free to claim again (no replica reads it).
        with self._lazy_write() as conn:
            claimed = list(
                conn.execute(
                    vector_queue.update()
                    .where(Q.tenant_id.in_(tenants), Q.memory_pk.in_([r[1] for r in waiting]), FREE)
                    .values(claimed_until=now + lease)
                    .returning(Q.memory_pk),
                    {"now": now},
                ).scalars()
            )
        if not claimed:
            return []
        claimed_rows = sa.select(M.id, M.content).where(M.tenant_id.in_(tenants), M.pk.in_(claimed))
        with self._read() as conn:
            return [(row[0], row[1]) for row in conn.execute(claimed_rows)]

    def _next_tenants(self, conn: Connection, count: int) -> list[uuid.UUID]:
        """Up to `count` tenants with queued memories, in key order from the one after the last
        claim's round, wrapping round to the first; the round's place moves to the last."""
        if count <= 0:
            return []
        walked = conn.execute(TENANT_WALK, {"after": self._round_after, "count": count})
        turn = list(dict.fromkeys(walked.scalars()))
        if turn:
            self._round_after = turn[-1]
        return turn

    def refuse_vectors(self, ids: Sequence[uuid.UUID]) -> int:
        if not ids:
            return 0
        keys = sa.select(M.tenant_id, M.pk).prefix_with(EVERY_TENANT).where(M.id.in_(list(ids)))
        with self._lazy_write() as conn:
            found = conn.execute(keys).all()
            if not found:
                return 0
            refusals = conn.execute(
                vector_queue.update()
                .where(
                    Q.tenant_id.in_(sorted({row[0] for row in found})),
                    Q.memory_pk.in_([row[1] for row in found]),
                )
                .values(refusals=Q.refusals + 1, claimed_until=None)
                .returning(Q.refusals)
            ).scalars()
            return sum(count >= MAX_REFUSALS for count in refusals)

    def vectors_set_aside(self) -> int:
        return self._queued(~WAITING)

    def vector_backlog(self) -> int:
        return self._queued(WAITING)

    def _queued(self, where: sa.ColumnElement[bool]) -> int:
        with self._read() as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.count())
                    .prefix_with(EVERY_TENANT)
                    .select_from(vector_queue)
                    .where(where)
                ).scalar_one()
            )

    def adopt_vectors(self, former: str, model: str, size: int) -> int:
        # A read first: on SQLite the writer is taken only when there is something to rename.
        with self._read() as conn:
            found = conn.execute(
                sa.select(V.memory_pk).prefix_with(EVERY_TENANT).where(V.model == former).limit(1)
            ).first()
        if found is None:
            return 0
        with self._write() as conn:
            renamed = conn.execute(
                memory_vectors.update()
                .prefix_with(EVERY_TENANT)
                .where(V.model == former, sa.func.length(V.vector) == size)
                .values(model=model)
            ).rowcount
            conn.execute(
                vector_chunks.update()
                .prefix_with(EVERY_TENANT)
                .where(C.model == former, sa.func.length(C.vectors) == C.rows * size)
                .values(model=model)
            )
        return int(renamed)

    def vector_models(self) -> list[str]:
        with self._read() as conn:
            found = conn.execute(
                sa.select(V.model).prefix_with(EVERY_TENANT).distinct().order_by(V.model)
            )
            return list(found.scalars())

    def other_model_vectors(self, query: MemoryQuery, model: str) -> str | None:
        if not query.audiences:
            return None
        with self._read() as conn:
            tenants, owners = self._owners(conn, query.audiences)
            if not tenants or not owners:
                return None
            params = {"tenants": tenants, "owners": sorted(owners), "model": model}
            if any(conn.execute(held, params).first() for held in OWN_MODEL):
                return None  # whatever the search's filters left: this model's vectors are here
            for statement in OTHER_MODELS:  # the chunks first: a reindex drops other models'
                found: str | None = conn.execute(statement, params).scalar()
                if found is not None:
                    return found
        return None

    def queue_for_model(self, model: str, batch: int) -> int:
        embedded = sa.select(V.memory_pk).where(
            V.tenant_id == M.tenant_id, V.memory_pk == M.pk, V.model == model
        )
        queued = sa.select(Q.memory_pk).where(Q.tenant_id == M.tenant_id, Q.memory_pk == M.pk)
        total, after = 0, -1
        while True:
            with self._read() as conn:
                keys = list(
                    conn.execute(
                        sa.select(M.pk)
                        .prefix_with(EVERY_TENANT)
                        .where(M.pk > after)
                        .order_by(M.pk)
                        .limit(batch)
                    ).scalars()
                )
            if not keys:
                break
            pending = (
                sa.select(M.tenant_id, M.pk)
                .prefix_with(EVERY_TENANT)
                .where(M.pk > after, M.pk <= keys[-1], ~sa.exists(embedded), ~sa.exists(queued))
            )
            with self._write() as conn:
                inserted = conn.execute(
                    vector_queue.insert()
                    .from_select(["tenant_id", "memory_pk"], pending)
                    .returning(Q.memory_pk)
                )
                total += len(inserted.all())
            after = keys[-1]
        with self._write() as conn:
            conn.execute(vector_chunks.delete().prefix_with(EVERY_TENANT).where(C.model != model))
            # The memories set aside get their tries again (the endpoint or its model changed).
            conn.execute(
                vector_queue.update()
                .prefix_with(EVERY_TENANT)
                .where(~WAITING)
                .values(refusals=0, claimed_until=None)
            )
        return total

    # --- writing vectors -------------------------------------------------------------------

    def save_vectors(
        self, model: str, ids: Sequence[uuid.UUID], vectors: NDArray[np.float32]
    ) -> int:
        if not ids:
            return 0
        quantized, scales = quantize(np.asarray(vectors, dtype=np.float32))
        by_id = {memory_id: index for index, memory_id in enumerate(ids)}
        owners = [getattr(M, column) for column, _ in OWNER_COLUMNS]
        # One transaction takes the memories off the queue with their vectors saved: lost to a
        # crash, they are still queued and embedded again (docs/search.md, "Write path").
        # The marks of the memories' tenants move: a replica serves their searches by meaning
        # once it holds the vectors (this thread acts for no caller, and `EVERYONE`'s mark
        # would send every tenant's reads to the primary after each save).
        tenants: list[uuid.UUID] = []
        with self._lazy_write(mark=tenants) as conn:
            # Lock the memories against a concurrent delete (PostgreSQL; SQLite has one writer),
            # in pk order, never waiting: a memory another transaction holds is passed over. One
            # being deleted (an erasure, a deletion) needs no vector, and its deletion takes its
            # queue row; one another save holds (a claim taken over) is that save's to store;
            # one being changed (a status) stays queued, its claim expires and it is embedded
            # again, as is one whose deletion rolls back. A deleter waits for the rows held here
            # (until this commits) but this save never waits for it, so an erasure is never a
            # deadlock's victim: waiting, a save and an erasure that took their rows in other
            # orders (by id; by scope and time) each held one the other wanted. `key_share`
            # without `read` is FOR NO KEY UPDATE: a delete's lock conflicts with it.
            found = conn.execute(
                sa.select(M.pk, M.id, M.tenant_id, M.scope, *owners)
                .prefix_with(EVERY_TENANT)
                .where(M.id.in_(list(ids)))
                .order_by(M.pk)
                .with_for_update(key_share=True, skip_locked=True)
            ).all()
            if not found:
                return 0
            pks = [row[0] for row in found]
            tenants.extend(sorted({row[2] for row in found}))
            conn.execute(
                vector_queue.delete().where(Q.tenant_id.in_(tenants), Q.memory_pk.in_(pks))
            )
            # A memory's text never changes, so its vector of `model` saved already (by a
            # worker that took it over when this one's lease ran out) is kept, and no second
            # place is added to its owners' layout: a copy there would take a place of the
            # search's first pass (`first_pass`'s `count x copies`). A vector of another model
            # is replaced (its tail rows go by their cascade, its chunks with the reindex that
            # switched models). A concurrent save of the same memory holds it (passed over
            # above); one that committed first is skipped here.
            conn.execute(
                memory_vectors.delete().where(
                    V.tenant_id.in_(tenants), V.memory_pk.in_(pks), V.model != model
                )
            )
            stored = {
                (row[0], row[1])
                for row in conn.execute(
                    self._insert_ignore(memory_vectors).returning(V.tenant_id, V.memory_pk),
                    [
                        {
                            "tenant_id": row[2],
                            "memory_pk": row[0],
                            "model": model,
                            "scale": float(scales[by_id[row[1]]]),
                            "vector": quantized[by_id[row[1]]].tobytes(),
                        }
                        for row in found
                    ],
                )
            }
            tail = [
                {"tenant_id": row[2], "owner": owner, "memory_pk": row[0]}
                for row in found
                if (row[2], row[0]) in stored
                for owner in owner_keys(row[3], row[4:])
            ]
            if tail:
                conn.execute(vector_tail.insert(), tail)
                self._seal(conn, model, {(entry["tenant_id"], entry["owner"]) for entry in tail})
        return len(stored)

    def _seal(self, conn: Connection, model: str, owners: Iterable[Layout]) -> None:
        """Turn every full tail among `owners` (tenant, owner key) into a chunk."""
        wanted = set(owners)
        # Every owner's layout is held before its tail is counted, in one order (no deadlock
        # between two savers): a concurrent save into the same tail commits first and its rows
        # are counted here. Counted without it, two saves that together fill a tail each saw
        # only their own rows, and neither sealed it.
        for tenant, owner in sorted(wanted):
            self._lock_owner(conn, tenant, owner)
        full = conn.execute(
            sa.select(T.tenant_id, T.owner)
            .where(
                T.tenant_id.in_(sorted({tenant for tenant, _ in wanted})),
                T.owner.in_(sorted({owner for _, owner in wanted})),
            )
            .group_by(T.tenant_id, T.owner)
            .having(sa.func.count() >= CHUNK_ROWS)
        ).all()
        for tenant, owner in sorted((row[0], row[1]) for row in full):
            if (tenant, owner) not in wanted:
                continue  # another tenant's tail of an owner key this batch also wrote
            # Memories another transaction is deleting (an erasure not committed yet) are
            # passed over, not waited for (it may wait for this owner's lock): their vectors
            # go with their deletion, never into a chunk (review19; PostgreSQL: SQLite has one
            # writer).
            rows = conn.execute(
                sa.select(V.memory_pk, V.scale, V.vector)
                .join(vector_tail, sa.and_(T.tenant_id == V.tenant_id, T.memory_pk == V.memory_pk))
                .join(memories, sa.and_(M.tenant_id == V.tenant_id, M.pk == V.memory_pk))
                .where(T.tenant_id == tenant, T.owner == owner, V.model == model)
                .order_by(V.memory_pk)
                .limit(CHUNK_ROWS)
                .with_for_update(of=memories, key_share=True, skip_locked=True)
            ).all()
            if len(rows) < CHUNK_ROWS:
                continue  # the tail holds vectors of another model, waiting for a reindex
            seq = conn.execute(
                sa.select(sa.func.coalesce(sa.func.max(C.seq), 0)).where(
                    C.tenant_id == tenant, C.owner == owner
                )
            ).scalar_one()
            pks = [row[0] for row in rows]
            vectors = b"".join(bytes(row[2]) for row in rows)
            conn.execute(
                vector_chunks.insert().values(
                    tenant_id=tenant,
                    owner=owner,
                    seq=int(seq) + 1,
                    model=model,
                    rows=len(rows),
                    pks=np.asarray(pks, dtype="<i8").tobytes(),
                    scales=np.asarray([row[1] for row in rows], dtype="<f4").tobytes(),
                    vectors=vectors,
                    bits=sign_bits(_int8_rows(vectors, len(rows))).tobytes(),
                )
            )
            conn.execute(
                vector_tail.delete().where(
                    T.tenant_id == tenant, T.owner == owner, T.memory_pk.in_(pks)
                )
            )

    def _lock_owner(self, conn: Connection, tenant: uuid.UUID, owner: str) -> None:  # noqa: ARG002
        """Hold the (`tenant`, `owner`)'s layout until this write transaction ends, so that two
        processes do not seal the same tail into a chunk of the same number (a dialect hook:
        SQLite has one writer at a time, PostgreSQL takes an advisory lock)."""
        return None

    def compact_vectors(
        self, after: tuple[uuid.UUID, str, int] | None, chunks: int
    ) -> tuple[uuid.UUID, str, int] | None:
        """Rewrite the next `chunks` chunks after `after` (by tenant, owner, seq) without the
        vectors of memories deleted since they were sealed; the position reached, or None past
        the last. The sweep serves every tenant; each chunk is rewritten within its own."""
        position = (
            sa.true()
            if after is None
            else sa.tuple_(C.tenant_id, C.owner, C.seq) > sa.tuple_(*after)
        )
        with self._read() as conn:
            rows = conn.execute(
                sa.select(C.tenant_id, C.owner, C.seq, C.pks)
                .prefix_with(EVERY_TENANT)
                .where(position)
                .order_by(C.tenant_id, C.owner, C.seq)
                .limit(chunks)
            ).all()
            if not rows:
                return None
            wanted: dict[uuid.UUID, set[int]] = {}
            for row in rows:
                wanted.setdefault(row[0], set()).update(
                    np.frombuffer(bytes(row[3]), dtype="<i8").tolist()
                )
            # Almost always every key is alive: one count per tenant says so (one parameter,
            # one statement text), and only a tenant with a dead key reads its alive keys.
            # The sweep runs while a server is idle, so its Python work competes with requests.
            of_tenant = sa.and_(
                V.tenant_id == sa.bindparam("tenant"), self._candidates_in(V.memory_pk)
            )
            alive: set[tuple[uuid.UUID, int]] = set()
            dead_in: set[uuid.UUID] = set()
            for tenant, pks in wanted.items():
                params = {"tenant": tenant, "candidates": sorted(pks)}
                count = sa.select(sa.func.count()).select_from(memory_vectors).where(of_tenant)
                if conn.execute(count, params).scalar_one() < len(pks):
                    dead_in.add(tenant)
                    found = conn.execute(sa.select(V.memory_pk).where(of_tenant), params)
                    alive.update((tenant, pk) for pk in found.scalars())
        for tenant, owner, seq, blob in rows:
            if tenant not in dead_in:
                continue
            keys = np.frombuffer(bytes(blob), dtype="<i8").tolist()
            if all((tenant, pk) in alive for pk in keys):
                continue
            # No mark: a replica's chunk that still holds a dead key only costs a search that
            # key, which the database check rejects (docs/search.md, "Vector storage").
            with self._write(mark=False) as conn:
                self._drop_dead(conn, tenant, owner, seq)
        return rows[-1][0], rows[-1][1], rows[-1][2]

    def _vector_owners(self, conn: Connection, where: sa.ColumnElement[bool]) -> set[Layout]:
        joined = sa.and_(V.tenant_id == M.tenant_id, V.memory_pk == M.pk)
        rows = conn.execute(
            sa.select(M.tenant_id, M.scope, *(getattr(M, column) for column, _ in OWNER_COLUMNS))
            .select_from(memories.join(memory_vectors, joined))
            .where(where)
            .distinct()
        ).all()
        return {(row[0], owner) for row in rows for owner in owner_keys(row[1], row[2:])}

    def _purge_vectors(self, conn: Connection, owners: set[Layout]) -> None:
        # Chunks are locked (`_drop_dead`) in one order, (tenant, owner, seq), by every
        # rewrite that takes several in one transaction: two erasures never deadlock on them.
        for tenant, owner in sorted(owners):
            seqs = conn.execute(
                sa.select(C.seq).where(C.tenant_id == tenant, C.owner == owner).order_by(C.seq)
            ).scalars()
            for seq in seqs.all():
                self._drop_dead(conn, tenant, owner, seq)

    def _purge_keys(self, conn: Connection, tenant: uuid.UUID, pks: set[int]) -> None:
        """Rewrite `tenant`'s sealed chunks that hold any of `pks` (memories just deleted)
        without them, in the caller's transaction. Reads every chunk's keys of the tenant
        (8 bytes a vector): for the rare delete after which a pk may be given again
        (`SqliteStore._keys_freed`)."""
        chunks = conn.execute(
            sa.select(C.owner, C.seq, C.pks).where(C.tenant_id == tenant).order_by(C.owner, C.seq)
        ).all()
        wanted = np.fromiter(pks, dtype="<i8", count=len(pks))
        for owner, seq, blob in chunks:
            if np.isin(np.frombuffer(bytes(blob), dtype="<i8"), wanted).any():
                self._drop_dead(conn, tenant, owner, seq)

    def _drop_dead(self, conn: Connection, tenant: uuid.UUID, owner: str, seq: int) -> None:
        """Rewrite one chunk without the vectors whose memory is gone (read again inside the
        write, so a concurrent compaction or delete is seen). The chunk is read `FOR UPDATE`
        (PostgreSQL): another rewrite of it (an erasure's purge, the sweep) waits for this one
        and then reads what it wrote, never writing back a vector this one dropped (review17's
        finding 9)."""
        this = (C.tenant_id == tenant, C.owner == owner, C.seq == seq)
        chunk = conn.execute(
            sa.select(C.pks, C.scales, C.vectors, C.bits).where(*this).with_for_update()
        ).first()
        if chunk is None:
            return
        keys = np.frombuffer(bytes(chunk[0]), dtype="<i8")
        alive = set(
            conn.execute(
                sa.select(V.memory_pk).where(
                    V.tenant_id == tenant, V.memory_pk.in_([int(pk) for pk in keys])
                )
            ).scalars()
        )
        keep = np.asarray([int(pk) in alive for pk in keys], dtype=bool)
        if not keep.any():
            conn.execute(vector_chunks.delete().where(*this))
            return
        scales = np.frombuffer(bytes(chunk[1]), dtype="<f4")
        vectors = _int8_rows(bytes(chunk[2]), len(keys))
        bits = np.frombuffer(bytes(chunk[3]), dtype=np.uint8).reshape(len(keys), -1)
        conn.execute(
            vector_chunks.update()
            .where(*this)
            .values(
                rows=int(keep.sum()),
                pks=keys[keep].tobytes(),
                scales=scales[keep].tobytes(),
                vectors=vectors[keep].tobytes(),
                bits=bits[keep].tobytes(),
            )
        )

    # --- searching -------------------------------------------------------------------------

    def nearest_memories(
        self,
        query: MemoryQuery,
        vector: NDArray[np.float32] | Callable[[], NDArray[np.float32]],
        model: str,
        limit: int,
    ) -> Sequence[Scored]:
        if not query.audiences or limit <= 0:
            return []
        rescore = max(RESCORE, 2 * limit)
        # No search budget here: the cost is bounded by the owners' sizes, not by the query's
        # words, and the statements are key lookups (a watchdog interrupt that lands while
        # numpy scores would hit the next statement instead).
        with self._read() as conn:
            tenants, owners = self._owners(conn, query.audiences)
            pks, bits = self._sign_bits(conn, tenants, owners, model)
            if len(pks) == 0:
                return []
            # Only now the query's vector: its embedding may have run beside the reads above.
            given = vector() if callable(vector) else vector
            probe = np.asarray(given, dtype=np.float32).reshape(-1)
            copies = len({owner[0] for owner in owners})  # a memory is in one owner of a kind
            nearest = first_pass(pks, bits, probe, rescore, copies)
            keys, scores = self._rescored(conn, tenants, nearest, model, probe)
            order = best(keys, scores, len(keys))
            found, share = self._recheck(conn, query, keys[order], scores[order], limit)
            if len(nearest) < len(pks) and (len(found) < limit or share < MIN_PASSED):
                # The filters (or statuses) keep few of the owners' memories, so few of the
                # closest passed: ask which memories the query holds and rank only those.
                statement, params = self._checked(query, with_ids=False, candidates=False)
                allowed = np.fromiter(conn.execute(statement, params).scalars(), dtype=np.int64)
                keep = np.isin(pks, allowed)
                nearest = first_pass(pks[keep], bits[keep], probe, rescore, copies)
                keys, scores = self._rescored(conn, tenants, nearest, model, probe)
                order = best(keys, scores, limit)
                found, _ = self._recheck(conn, query, keys[order], scores[order], limit)
        return found[:limit]

    def _recheck(
        self, conn: Connection, query: MemoryQuery, pks: NDArray[np.int64], scores: Any, limit: int
    ) -> tuple[list[Scored], float]:
        """The best `limit` candidates (`pks`: distinct, best first) that the query returns, by
        id with their scores, and the share of the candidates asked about that it returns. The
        best `limit` are asked about first, by key (no row is read); the rest only when some of
        those do not pass (without a narrowing filter, all do)."""
        if len(pks) == 0:
            return [], 0.0
        statement, params = self._checked(query, with_ids=True)
        passed: dict[int, uuid.UUID] = {}
        asked = 0
        for part in (pks[:limit], pks[limit:]):
            if len(part) == 0 or len(passed) >= limit:
                break
            params["candidates"] = part.tolist()
            passed.update(
                (pk, memory_id) for pk, memory_id in conn.execute(statement, params).all()
            )
            asked += len(part)
        found: list[Scored] = []
        for pk, score in zip(pks.tolist(), scores.tolist(), strict=True):
            if pk in passed:
                found.append(Scored(passed[pk], float(score)))
                if len(found) == limit:
                    break
        return found, len(passed) / asked

    def _owners(
        self, conn: Connection, audiences: Iterable[Audience]
    ) -> tuple[list[uuid.UUID], set[str]]:
        """The tenants and owner keys whose vectors hold every memory of the audiences (a
        superset: the layout only narrows the candidates)."""
        tenants: set[uuid.UUID] = set()
        keys: set[str] = set()
        for audience in audiences:
            tenants |= self._audience_tenants(conn, audience)
            keys |= self._audience_owners(conn, audience)
        return sorted(tenants), keys

    def _audience_tenants(self, conn: Connection, audience: Audience) -> set[uuid.UUID]:
        """The audience's tenant, or (one pinning a subject without one) every tenant holding
        memories about that subject (`subject_tenants`), as its memories' conditions reach."""
        if audience.tenant_id is not None:
            return {audience.tenant_id}
        return set(conn.execute(tenants_of(audience.subject_id)).scalars())

    def _audience_owners(self, conn: Connection, audience: Audience) -> set[str]:
        """The keys of the narrowest owner the audience pins, for each scope it admits."""
        scopes = audience.scopes if audience.scopes is not None else tuple(Scope)
        for column, prefix in OWNER_COLUMNS[:3]:
            value = getattr(audience, column)
            if value is not None:
                return {owner_key(prefix, scope, value) for scope in scopes}
        if audience.source_agent_owner_id is not None:
            owned = sa.select(agents.c.id).where(
                agents.c.owner_id == audience.source_agent_owner_id
            )
            found = conn.execute(owned).scalars().all()
            return {owner_key("a", scope, agent) for agent in found for scope in scopes}
        if audience.room_member_user_id is not None:
            rooms = sa.select(chat_participants.c.chat_room_id).where(
                chat_participants.c.participant_id == audience.room_member_user_id
            )
            found = conn.execute(rooms).scalars().all()
            return {owner_key("r", scope, room) for room in found for scope in scopes}
        assert audience.organization_id is not None  # an audience pins an owner
        return {owner_key("o", scope, audience.organization_id) for scope in scopes}

    def _sign_bits(
        self, conn: Connection, tenants: list[uuid.UUID], owners: set[str], model: str
    ) -> tuple[NDArray[np.int64], NDArray[np.uint8]]:
        """Every vector of `model` the owners hold in `tenants` (a memory once per owner holding
        it): its memory's primary key and its sign bits (rows of `dimensions / 8` bytes)."""
        if not owners or not tenants:
            return np.empty(0, np.int64), np.empty((0, 0), np.uint8)
        wanted = sorted(owners)
        params = {"tenants": tenants, "owners": wanted, "model": model}
        chunks: list[Any] = []
        tail: list[Any] = []
        for row in self._blob_rows(conn, "layout", params):
            (chunks if row[0] is None else tail).append(row)
        pks = [np.frombuffer(bytes(row[1]), dtype="<i8") for row in chunks]
        bits = [np.frombuffer(bytes(row[2]), dtype=np.uint8) for row in chunks]
        if tail:
            pks.append(np.asarray([row[0] for row in tail], dtype=np.int64))
            vectors = _int8_rows(b"".join(bytes(row[2]) for row in tail), len(tail))
            bits.append(sign_bits(vectors).reshape(-1))
        if not pks:
            return np.empty(0, np.int64), np.empty((0, 0), np.uint8)
        keys = np.concatenate(pks).astype(np.int64)
        return keys, np.concatenate(bits).reshape(len(keys), -1)

    def _rescored(
        self,
        conn: Connection,
        tenants: list[uuid.UUID],
        candidates: NDArray[np.int64],
        model: str,
        probe: NDArray[np.float32],
    ) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
        """The candidates' exact scores (cosine of their int8 vectors with `probe`), each
        memory once; a memory deleted or re-embedded by another model since is left out."""
        if len(candidates) == 0:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        keys = np.unique(candidates).tolist()
        rows = self._blob_rows(conn, "vectors", {"tenants": tenants, "keys": keys, "model": model})
        if not rows:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        found = np.asarray([row[0] for row in rows], dtype=np.int64)
        scales = np.asarray([row[1] for row in rows], dtype=np.float32)
        vectors = _int8_rows(b"".join(bytes(row[2]) for row in rows), len(rows))
        return found, int8_scores(vectors, scales, probe)

    def _blob_rows(self, conn: Connection, name: str, params: dict[str, Any]) -> Sequence[Any]:
        """The rows of `BLOB_READS[name]` (a dialect hook: PostgreSQL reads them in binary,
        not as hex text)."""
        return conn.execute(BLOB_READS[name], params).all()


def _keys_in(column: sa.ColumnElement[Any], name: str) -> sa.ColumnElement[bool]:
    return column.in_(sa.bindparam(name, expanding=True))


BLOB_READS: dict[str, sa.Select[Any] | sa.CompoundSelect[Any]] = {
    # The owners' chunks (no key, their keys' blob, their sign bits) and then their tails (the
    # key, no blob, the int8 vector): one statement, one round trip to PostgreSQL.
    "layout": sa.union_all(
        sa.select(
            sa.cast(sa.null(), sa.BigInteger()).label("memory_pk"),
            C.pks,
            C.bits.label("blob"),
        ).where(
            _keys_in(C.tenant_id, "tenants"),
            _keys_in(C.owner, "owners"),
            C.model == sa.bindparam("model"),
        ),
        sa.select(V.memory_pk, sa.cast(sa.null(), sa.LargeBinary()), V.vector)
        .join(vector_tail, sa.and_(T.tenant_id == V.tenant_id, T.memory_pk == V.memory_pk))
        .where(
            _keys_in(T.tenant_id, "tenants"),
            _keys_in(T.owner, "owners"),
            V.model == sa.bindparam("model"),
        ),
    ),
    "vectors": sa.select(V.memory_pk, V.scale, V.vector).where(
        _keys_in(V.tenant_id, "tenants"),
        _keys_in(V.memory_pk, "keys"),
        V.model == sa.bindparam("model"),
    ),
}
"""The statements that read the search's blobs, built once: each binds the audiences'
`tenants`, a list (`owners` or `keys`) and the `model`."""


def _models_held(other: bool) -> tuple[sa.Select[Any], sa.Select[Any]]:
    """A model of the owners' chunks, then of their tails (the first found): one other than
    the bound `model` (`other`), or `model` itself; binding as `BLOB_READS` do."""

    def matches(column: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        return column != sa.bindparam("model") if other else column == sa.bindparam("model")

    chunks = sa.select(C.model).where(
        _keys_in(C.tenant_id, "tenants"), _keys_in(C.owner, "owners"), matches(C.model)
    )
    tails = (
        sa.select(V.model)
        .join(vector_tail, sa.and_(T.tenant_id == V.tenant_id, T.memory_pk == V.memory_pk))
        .where(_keys_in(T.tenant_id, "tenants"), _keys_in(T.owner, "owners"), matches(V.model))
    )
    return chunks.limit(1), tails.limit(1)


OWN_MODEL = _models_held(other=False)
OTHER_MODELS = _models_held(other=True)
"""`other_model_vectors`' reads: whether the owners hold any vector of the server's model,
then another model's."""


def _int8_rows(blob: bytes, rows: int) -> NDArray[np.int8]:
    """`rows` int8 vectors stored end to end."""
    return np.frombuffer(blob, dtype=np.int8).reshape(rows, -1)
