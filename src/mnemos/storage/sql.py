"""The SQL implementation of `Store`, shared by SQLite and PostgreSQL.

Backends differ only in how they open connections (`_read`, `_write`), how they match a full-text
query (`_search_clause`) and how they insert-or-ignore (`_insert_ignore`).
"""

from __future__ import annotations

import abc
import os
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.dml import Insert

from mnemos.domain.ids import utcnow
from mnemos.domain.models import (
    Agent,
    AgentContext,
    Memory,
    Organization,
    Status,
    User,
    UserContext,
)
from mnemos.domain.pagination import Position
from mnemos.domain.queries import Audience, MemoryQuery
from mnemos.domain.search import SearchQuery
from mnemos.errors import Conflict, StorageUnavailable
from mnemos.storage.base import KeyKind, Store
from mnemos.storage.rows import (
    AGENT_COLS,
    MEMORY_COLUMNS,
    ORG_COLS,
    USER_COLS,
    memory_values,
    to_agent,
    to_memory,
    to_org,
    to_user,
)
from mnemos.storage.schema import (
    UTCDateTime,
    agents,
    api_keys,
    chat_participants,
    memories,
    organizations,
    server_secrets,
    users,
)

M = memories.c


class SqlStore(Store):
    """A `Store` over SQLAlchemy Core; subclasses supply the dialect's differences."""

    def __init__(self, read_engine: Engine, write_engine: Engine):
        self._read_engine = read_engine
        self._write_engine = write_engine

    # --- dialect hooks ---------------------------------------------------------------------

    @abc.abstractmethod
    def _search_clause(self, search: SearchQuery) -> sa.ColumnElement[bool]:
        """A condition on `memories` that holds when the row's content matches `search`."""

    @abc.abstractmethod
    def _insert_ignore(self, table: sa.Table) -> Insert:
        """An INSERT that does nothing when the primary key already exists."""

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self._guard(), self._read_engine.connect() as conn:
            yield conn

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        with self._guard(), self._write_engine.begin() as conn:
            yield conn

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except sa.exc.OperationalError as exc:
            raise StorageUnavailable(details={"reason": str(exc.orig)[:200]}) from exc

    # --- lifecycle -------------------------------------------------------------------------

    def ping(self) -> None:
        with self._read() as conn:
            conn.execute(sa.text("SELECT 1"))

    def close(self) -> None:
        self._read_engine.dispose()
        self._write_engine.dispose()

    def secret(self, name: str) -> bytes:
        with self._write() as conn:
            conn.execute(
                self._insert_ignore(server_secrets).values(name=name, value=os.urandom(32))
            )
            value = conn.execute(
                sa.select(server_secrets.c.value).where(server_secrets.c.name == name)
            ).scalar_one()
        return bytes(value)

    # --- accounts --------------------------------------------------------------------------

    def create_organization(self, org: Organization) -> None:
        with self._write() as conn:
            conn.execute(
                organizations.insert().values(
                    id=org.id,
                    name=org.name,
                    memory_enabled=org.memory_enabled,
                    inserted_at=utcnow(),
                )
            )

    def get_organization(self, org_id: uuid.UUID) -> Organization | None:
        with self._read() as conn:
            row = conn.execute(organizations.select().where(organizations.c.id == org_id)).first()
        return to_org(row) if row else None

    def create_user(self, user: User) -> None:
        try:
            with self._write() as conn:
                conn.execute(users.insert().values(**user.__dict__))
        except sa.exc.IntegrityError as exc:
            raise Conflict(
                "A user with this email or handle exists", {"email": user.email}
            ) from exc

    def get_user(self, user_id: uuid.UUID) -> User | None:
        with self._read() as conn:
            row = conn.execute(users.select().where(users.c.id == user_id)).first()
        return to_user(row) if row else None

    def set_memory_enabled(
        self, kind: Literal["organization", "user"], entity_id: uuid.UUID, enabled: bool
    ) -> bool:
        table = organizations if kind == "organization" else users
        with self._write() as conn:
            result = conn.execute(
                table.update().where(table.c.id == entity_id).values(memory_enabled=enabled)
            )
        return result.rowcount == 1

    def create_agent(self, agent: Agent) -> None:
        try:
            with self._write() as conn:
                conn.execute(agents.insert().values(**agent.__dict__))
        except sa.exc.IntegrityError as exc:
            raise Conflict("An agent with this handle exists", {"handle": agent.handle}) from exc

    def get_agent(self, agent_id: uuid.UUID) -> Agent | None:
        with self._read() as conn:
            row = conn.execute(agents.select().where(agents.c.id == agent_id)).first()
        return to_agent(row) if row else None

    def add_api_key(self, key_hash: str, kind: KeyKind, principal_id: uuid.UUID) -> None:
        with self._write() as conn:
            conn.execute(
                api_keys.insert().values(
                    key_hash=key_hash, kind=kind, principal_id=principal_id, inserted_at=utcnow()
                )
            )

    def _live_key(self, key_hash: str, kind: KeyKind) -> sa.ColumnElement[bool]:
        return sa.and_(
            api_keys.c.key_hash == key_hash,
            api_keys.c.kind == kind,
            api_keys.c.revoked_at.is_(None),
        )

    def agent_by_key(self, key_hash: str) -> AgentContext | None:
        query = (
            sa.select(*AGENT_COLS, *USER_COLS, *ORG_COLS)
            .select_from(
                api_keys.join(agents, agents.c.id == api_keys.c.principal_id)
                .join(users, users.c.id == agents.c.owner_id)
                .outerjoin(organizations, organizations.c.id == users.c.organization_id)
            )
            .where(self._live_key(key_hash, "agent"))
        )
        with self._read() as conn:
            row = conn.execute(query).first()
        if row is None:
            return None
        org = to_org(row, "o_") if row._mapping["o_id"] is not None else None
        return AgentContext(to_agent(row, "a_"), to_user(row, "u_"), org)

    def _user_context(self, where: sa.ColumnElement[bool], *joins: Any) -> UserContext | None:
        source: Any = users
        for table, on in joins:
            source = source.join(table, on)
        query = (
            sa.select(*USER_COLS, *ORG_COLS)
            .select_from(
                source.outerjoin(organizations, organizations.c.id == users.c.organization_id)
            )
            .where(where)
        )
        with self._read() as conn:
            row = conn.execute(query).first()
        if row is None:
            return None
        org = to_org(row, "o_") if row._mapping["o_id"] is not None else None
        return UserContext(to_user(row, "u_"), org)

    def user_by_key(self, key_hash: str) -> UserContext | None:
        return self._user_context(
            self._live_key(key_hash, "user"), (api_keys, api_keys.c.principal_id == users.c.id)
        )

    def user_context(self, user_id: uuid.UUID) -> UserContext | None:
        return self._user_context(users.c.id == user_id)

    # --- memories --------------------------------------------------------------------------

    def insert_memory(self, memory: Memory) -> None:
        with self._write() as conn:
            conn.execute(memories.insert().values(**memory_values(memory)))

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
        if len(query.audiences) == 1:
            conditions = [self._audience(query.audiences[0]), *self._filters(query)]
            if after is not None:
                conditions.append(self._after(after))
            statement = sa.select(*MEMORY_COLUMNS).where(*conditions)
        else:
            keys = self._matching_keys(query, after, depth=limit + offset)
            statement = sa.select(*MEMORY_COLUMNS).join(keys, keys.c.id == M.id)
        statement = (
            statement.order_by(M.inserted_at.desc(), M.id.desc()).limit(limit).offset(offset)
        )
        with self._read() as conn:
            return [to_memory(row) for row in conn.execute(statement)]

    def count_memories(self, query: MemoryQuery) -> int:
        if not query.audiences:
            return 0
        keys = self._matching_keys(query, after=None, depth=None)
        statement = sa.select(sa.func.count()).select_from(keys)
        with self._read() as conn:
            return int(conn.execute(statement).scalar_one())
