"""The SQL implementation of `Store`, shared by SQLite and PostgreSQL.

Backends differ only in how they open connections (`_read`, `_write`), how they match and rank a
full-text query (`_search_clause`, `_search_rank`) and how they insert-or-ignore
(`_insert_ignore`): see `sql_base.py`. What each audience field and filter means in SQL is in
`sql_conditions.py`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mnemos.domain.models import Memory, Status
from mnemos.domain.pagination import Position, RankPosition
from mnemos.domain.queries import MemoryQuery, Order
from mnemos.domain.search import Ranked
from mnemos.errors import Conflict
from mnemos.storage.base import Store
from mnemos.storage.rows import MEMORY_COLUMNS, memory_values, to_memory
from mnemos.storage.schema import UTCDateTime, idempotency_keys, memories
from mnemos.storage.sql_accounts import AccountsSql
from mnemos.storage.sql_base import replica_read
from mnemos.storage.sql_conditions import (
    AUDIENCE_SQL,
    FILTER_SQL,
    FieldSql,
    audience_values,
    filter_values,
)
from mnemos.storage.sql_rooms import RoomsSql
from mnemos.storage.sql_tuya import TuyaSql

M = memories.c


class SqlStore(AccountsSql, RoomsSql, TuyaSql, Store):
    """A `Store` over SQLAlchemy Core; subclasses supply the dialect's differences."""

    def insert_memory(self, memory: Memory) -> None:
        with self._write() as conn:
            conn.execute(memories.insert().values(**memory_values(memory)))

    def insert_memory_once(
        self, memory: Memory, principal_id: uuid.UUID, key: str, fingerprint: str, ttl: timedelta
    ) -> tuple[uuid.UUID, str]:
        keys = idempotency_keys.c
        mine = sa.and_(keys.principal_id == principal_id, keys.key == key)
        with self._write() as conn:
            conn.execute(
                idempotency_keys.delete().where(mine, keys.inserted_at < memory.inserted_at - ttl)
            )
            claimed = conn.execute(
                self._insert_ignore(idempotency_keys)
                .values(
                    principal_id=principal_id,
                    key=key,
                    fingerprint=fingerprint,
                    memory_id=memory.id,
                    inserted_at=memory.inserted_at,
                )
                .returning(keys.memory_id)
            ).first()
            if claimed is not None:
                conn.execute(memories.insert().values(**memory_values(memory)))
                return memory.id, fingerprint
            row = conn.execute(sa.select(keys.memory_id, keys.fingerprint).where(mine)).one()
        return row[0], row[1]

    @replica_read
    def get_memory(self, memory_id: uuid.UUID) -> Memory | None:
        with self._read() as conn:
            row = conn.execute(sa.select(*MEMORY_COLUMNS).where(M.id == memory_id)).first()
        return to_memory(row) if row else None

    def set_memory_status(
        self, memory_id: uuid.UUID, status: Status, now: datetime
    ) -> Memory | None:
        try:
            with self._write() as conn:
                conn.execute(
                    memories.update()
                    .where(M.id == memory_id)
                    .values(status=status.value, updated_at=now)
                )
                row = conn.execute(sa.select(*MEMORY_COLUMNS).where(M.id == memory_id)).first()
        except sa.exc.IntegrityError:  # restoring a Tuya value whose key has a newer active one
            raise Conflict("Another value of this memory's key is active") from None
        return to_memory(row) if row else None

    def delete_memory(self, memory_id: uuid.UUID) -> bool:
        return self.delete_memories([memory_id]) == 1

    def delete_memories(self, memory_ids: list[uuid.UUID]) -> int:
        if not memory_ids:
            return 0
        with self._write() as conn:
            return int(conn.execute(memories.delete().where(M.id.in_(memory_ids))).rowcount)

    def replace_memories(
        self, new: list[Memory], superseded: list[uuid.UUID], now: datetime
    ) -> None:
        with self._write() as conn:
            if superseded:
                conn.execute(
                    memories.update()
                    .where(M.id.in_(superseded), M.status == Status.ACTIVE.value)
                    .values(status=Status.SUPERSEDED.value, updated_at=now)
                )
            if new:
                conn.execute(memories.insert(), [memory_values(m) for m in new])

    # --- lists -----------------------------------------------------------------------------
    #
    # A list's SQL depends only on the query's shape (which fields are set), never on its values,
    # so each shape is built once and cached with named bound parameters; a request only computes
    # the parameters. Building a SELECT costs SQLAlchemy more than SQLite takes to run it.

    def list_statement(
        self, query: MemoryQuery, *, limit: int, after: Position | None = None, offset: int = 0
    ) -> tuple[sa.Select[Any], dict[str, Any]]:
        """The SELECT behind `list_memories` and its parameters (also used to show plans)."""
        union = len(query.audiences) > 1
        params = self._list_params(query, after)
        shape = self._shape("list", query, params)
        params["limit"] = limit
        params["offset"] = offset
        if union:
            params["depth"] = limit + offset
        statement = self._statements.get(shape)
        if statement is None:
            if union:
                keys = self._matching_keys(query, after is not None, depth=True)
                statement = sa.select(*MEMORY_COLUMNS).join(keys, keys.c.id == M.id)
            else:
                statement = sa.select(*MEMORY_COLUMNS).where(
                    *self._branch_conditions(query, 0, after is not None)
                )
            statement = (
                statement.order_by(M.inserted_at.desc(), M.id.desc())
                .limit(sa.bindparam("limit", type_=sa.Integer()))
                .offset(sa.bindparam("offset", type_=sa.Integer()))
            )
            self._remember(shape, statement)
        return statement, params

    @replica_read
    def list_memories(
        self,
        query: MemoryQuery,
        *,
        limit: int,
        after: Position | None = None,
        offset: int = 0,
    ) -> Sequence[Memory]:
        if query.order is not Order.NEWEST:
            raise ValueError("list_memories is newest first: rank_memories ranks")
        if not query.audiences:
            return []
        statement, params = self.list_statement(query, limit=limit, after=after, offset=offset)
        with self._read() as conn, self._bounded(conn, query):
            return [to_memory(row) for row in conn.execute(statement, params)]

    @replica_read
    def rank_memories(
        self, query: MemoryQuery, *, limit: int, after: RankPosition | None = None
    ) -> Sequence[Ranked]:
        if query.search is None or query.order is not Order.RELEVANCE:
            raise ValueError("rank_memories needs a search in relevance order")
        if not query.audiences:
            return []
        params = self._list_params(query, None)
        shape = (*self._shape("rank", query, params), after is not None)
        params["limit"] = limit
        if after is not None:
            params["after_score"] = after.score
            params["after_id"] = after.id
        statement = self._statements.get(shape)
        if statement is None:
            statement = self._ranked_statement(query, after is not None)
            self._remember(shape, statement)
        with self._read() as conn, self._bounded(conn, query):
            rows = conn.execute(statement, params)
            return [Ranked(to_memory(row[1:]), float(row[0])) for row in rows]

    def _ranked_statement(self, query: MemoryQuery, after: bool) -> sa.Select[Any]:
        """`(score, *MEMORY_COLUMNS)` of the best matches: each audience's matches scored, a
        memory in several audiences counted once, ordered by `(score, id)` descending."""
        branches = []
        for index in range(len(query.audiences)):
            source, match, score = self._search_rank(sa.bindparam(f"a{index}_search"))
            branches.append(
                sa.select(M.id.label("id"), sa.cast(score, sa.Float()).label("score"))
                .select_from(source)
                .where(match, *self._branch_conditions(query, index, after=False, search=False))
            )
        scored = sa.union_all(*branches).subquery("scored")
        best = (
            sa.select(scored.c.id, sa.func.max(scored.c.score).label("score"))
            .group_by(scored.c.id)
            .subquery("ranked")
        )
        statement = sa.select(best.c.score, *MEMORY_COLUMNS).join(best, best.c.id == M.id)
        if after:
            at = sa.bindparam("after_score", type_=sa.Float())
            statement = statement.where(
                sa.or_(
                    best.c.score < at,
                    sa.and_(best.c.score == at, M.id < sa.bindparam("after_id", type_=sa.Uuid())),
                )
            )
        return statement.order_by(best.c.score.desc(), M.id.desc()).limit(
            sa.bindparam("limit", type_=sa.Integer())
        )

    @replica_read
    def count_memories(self, query: MemoryQuery) -> int:
        if not query.audiences:
            return 0
        params = self._list_params(query, None)
        shape = self._shape("count", query, params)
        statement = self._statements.get(shape)
        if statement is None:
            keys = self._matching_keys(query, after=False, depth=False)
            statement = sa.select(sa.func.count()).select_from(keys)
            self._remember(shape, statement)
        with self._read() as conn, self._bounded(conn, query):
            return int(conn.execute(statement, params).scalar_one())

    def _bounded(self, conn: Connection, query: MemoryQuery) -> AbstractContextManager[None]:
        """A search runs within its time budget; a plain list is bounded by its indexes."""
        return self._search_budget(conn) if query.search is not None else nullcontext()

    def _remember(self, shape: tuple[Any, ...], statement: sa.Select[Any]) -> None:
        if len(self._statements) >= MAX_CACHED_STATEMENTS:
            self._statements.clear()
        self._statements[shape] = statement

    @staticmethod
    def _shape(kind: str, query: MemoryQuery, params: dict[str, Any]) -> tuple[Any, ...]:
        """Which parts of a query are set, read off the names of its parameters (each names the
        audience, filter, search or keyset position it binds): equal shapes have equal SQL."""
        return (kind, tuple(params), tuple(a.without_subject for a in query.audiences))

    def _list_params(self, query: MemoryQuery, after: Position | None) -> dict[str, Any]:
        params = {f"f_{name}": value for name, value in filter_values(query)}
        for i, audience in enumerate(query.audiences):
            for name, value in audience_values(audience):
                params[f"a{i}_{name}"] = value
            if query.search is not None:
                params[f"a{i}_search"] = self._search_value(query.search, audience)
        if after is not None:
            params["after_at"] = after.inserted_at
            params["after_id"] = after.id
        return params

    def _branch_conditions(
        self, query: MemoryQuery, index: int, after: bool, search: bool = True
    ) -> list[sa.ColumnElement[bool]]:
        """Audience `index` of the query, its filters, its search (unless `search` is False: a
        ranked branch matches it in its own FROM) and the keyset position."""
        audience = query.audiences[index]
        conditions = [
            _condition(AUDIENCE_SQL, name, f"a{index}_{name}")
            for name, _ in audience_values(audience)
        ]
        if audience.without_subject:
            conditions.append(M.subject_id.is_(None))
        conditions += [
            _condition(FILTER_SQL, name, f"f_{name}") for name, _ in filter_values(query)
        ]
        if search and query.search is not None:
            conditions.append(self._search_clause(sa.bindparam(f"a{index}_search")))
        if after:
            conditions.append(
                sa.tuple_(M.inserted_at, M.id)
                < sa.tuple_(
                    sa.bindparam("after_at", type_=UTCDateTime()),
                    sa.bindparam("after_id", type_=sa.Uuid()),
                )
            )
        return conditions

    def _matching_keys(self, query: MemoryQuery, after: bool, depth: bool) -> sa.Subquery:
        """`(inserted_at, id)` of every match: one newest-first branch per audience, unioned.

        Each branch can walk its own index in order and stop after `depth` rows, so a page of a
        union of audiences costs a few short index scans instead of one filtered sort.
        """
        branches = []
        for index in range(len(query.audiences)):
            branch = sa.select(M.inserted_at, M.id).where(
                *self._branch_conditions(query, index, after)
            )
            if depth:
                branch = branch.order_by(M.inserted_at.desc(), M.id.desc()).limit(
                    sa.bindparam("depth", type_=sa.Integer())
                )
            inner = branch.subquery()
            branches.append(sa.select(inner.c.inserted_at, inner.c.id))
        return sa.union(*branches).subquery("matches")


MAX_CACHED_STATEMENTS = 512


def _condition(table: dict[str, FieldSql | None], name: str, key: str) -> sa.ColumnElement[bool]:
    """Field `name`'s condition on the parameter bound as `key`."""
    entry = table[name]
    assert entry is not None  # only fields with SQL are ever bound
    return entry.condition(sa.bindparam(key, expanding=entry.expanding))
