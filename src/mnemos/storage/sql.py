"""The SQL implementation of `Store`, shared by SQLite and PostgreSQL.

Backends differ only in how they open connections (`_read`, `_write`), how they match a full-text
query (`_search_clause`) and how they insert-or-ignore (`_insert_ignore`): see `sql_base.py`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from mnemos.domain.models import Memory, Status
from mnemos.domain.pagination import Position
from mnemos.domain.queries import Audience, MemoryQuery
from mnemos.storage.base import Store
from mnemos.storage.rows import MEMORY_COLUMNS, memory_values, to_memory
from mnemos.storage.schema import UTCDateTime, agents, chat_participants, idempotency_keys, memories
from mnemos.storage.sql_accounts import AccountsSql
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

    def get_memory(self, memory_id: uuid.UUID) -> Memory | None:
        with self._read() as conn:
            row = conn.execute(sa.select(*MEMORY_COLUMNS).where(M.id == memory_id)).first()
        return to_memory(row) if row else None

    def set_memory_status(
        self, memory_id: uuid.UUID, status: Status, now: datetime
    ) -> Memory | None:
        with self._write() as conn:
            conn.execute(
                memories.update()
                .where(M.id == memory_id)
                .values(status=status.value, updated_at=now)
            )
            row = conn.execute(sa.select(*MEMORY_COLUMNS).where(M.id == memory_id)).first()
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

    def _audience(self, audience: Audience) -> sa.ColumnElement[bool]:
        parts: list[sa.ColumnElement[bool]] = []
        if audience.scopes is not None:
            parts.append(M.scope.in_([scope.value for scope in audience.scopes]))
        if audience.source_agent_id is not None:
            parts.append(M.source_agent_id == audience.source_agent_id)
        if audience.organization_id is not None:
            parts.append(M.organization_id == audience.organization_id)
        if audience.subject_id is not None:
            parts.append(M.subject_id == audience.subject_id)
        if audience.room_member_user_id is not None:
            rooms = sa.select(chat_participants.c.chat_room_id).where(
                chat_participants.c.participant_id == audience.room_member_user_id
            )
            parts.append(M.chat_room_id.in_(rooms))
        if audience.source_agent_owner_id is not None:
            owned = sa.select(agents.c.id).where(
                agents.c.owner_id == audience.source_agent_owner_id
            )
            parts.append(M.source_agent_id.in_(owned))
        if audience.chat_room_id is not None:
            parts.append(M.chat_room_id == audience.chat_room_id)
        if audience.without_subject:
            parts.append(M.subject_id.is_(None))
        return sa.and_(*parts)

    def _filters(self, query: MemoryQuery) -> list[sa.ColumnElement[bool]]:
        conditions: list[sa.ColumnElement[bool]] = []
        if len(query.statuses) < len(Status):
            conditions.append(M.status.in_([status.value for status in query.statuses]))
        for column, value in (
            (M.system, query.system),
            (M.type, query.type),
            (M.segment, query.segment),
        ):
            if value is not None:
                conditions.append(column == value.value)
        for column, ident in (
            (M.subject_id, query.subject_id),
            (M.source_agent_id, query.source_agent_id),
            (M.chat_room_id, query.chat_room_id),
            (M.id, query.memory_id),
        ):
            if ident is not None:
                conditions.append(column == ident)
        if query.search is not None:
            conditions.append(self._search_clause(query.search))
        return conditions

    @staticmethod
    def _after(position: Position) -> sa.ColumnElement[bool]:
        return sa.tuple_(M.inserted_at, M.id) < sa.tuple_(
            sa.literal(position.inserted_at, UTCDateTime()), sa.literal(position.id, sa.Uuid())
        )

    def _matching_keys(
        self, query: MemoryQuery, after: Position | None, depth: int | None
    ) -> sa.Subquery:
        """`(inserted_at, id)` of every match: one newest-first branch per audience, unioned.

        Each branch can walk its own index in order and stop after `depth` rows, so a page of a
        union of audiences costs a few short index scans instead of one filtered sort.
        """
        common = self._filters(query)
        if after is not None:
            common.append(self._after(after))
        branches = []
        for audience in query.audiences:
            branch = sa.select(M.inserted_at, M.id).where(self._audience(audience), *common)
            if depth is not None:
                branch = branch.order_by(M.inserted_at.desc(), M.id.desc()).limit(depth)
            inner = branch.subquery()
            branches.append(sa.select(inner.c.inserted_at, inner.c.id))
        return sa.union(*branches).subquery("matches")

    def list_statement(
        self, query: MemoryQuery, *, limit: int, after: Position | None = None, offset: int = 0
    ) -> sa.Select[Any]:
        """The SELECT behind `list_memories` (also used to show query plans)."""
        if len(query.audiences) == 1:
            conditions = [self._audience(query.audiences[0]), *self._filters(query)]
            if after is not None:
                conditions.append(self._after(after))
            statement = sa.select(*MEMORY_COLUMNS).where(*conditions)
        else:
            keys = self._matching_keys(query, after, depth=limit + offset)
            statement = sa.select(*MEMORY_COLUMNS).join(keys, keys.c.id == M.id)
        return statement.order_by(M.inserted_at.desc(), M.id.desc()).limit(limit).offset(offset)

    def list_memories(
        self,
        query: MemoryQuery,
        *,
        limit: int,
        after: Position | None = None,
        offset: int = 0,
    ) -> Sequence[Memory]:
        if not query.audiences:
            return []
        statement = self.list_statement(query, limit=limit, after=after, offset=offset)
        with self._read() as conn:
            return [to_memory(row) for row in conn.execute(statement)]

    def count_memories(self, query: MemoryQuery) -> int:
        if not query.audiences:
            return 0
        keys = self._matching_keys(query, after=None, depth=None)
        statement = sa.select(sa.func.count()).select_from(keys)
        with self._read() as conn:
            return int(conn.execute(statement).scalar_one())
