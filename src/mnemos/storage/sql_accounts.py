"""Organizations, people, agents and keys in SQL."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Literal, cast

import sqlalchemy as sa

from mnemos.domain.history import SERVER
from mnemos.domain.ids import utcnow
from mnemos.domain.models import (
    Agent,
    AgentContext,
    ChangedBy,
    HistoryEvent,
    Organization,
    User,
    UserContext,
)
from mnemos.errors import Conflict
from mnemos.storage.base import AgentMemoryPosition, KeyKind
from mnemos.storage.history_rows import history_row, record
from mnemos.storage.rows import AGENT_COLS, ORG_COLS, USER_COLS, to_agent, to_org, to_user
from mnemos.storage.schema import (
    agents,
    api_keys,
    chat_participants,
    memories,
    organizations,
    users,
)
from mnemos.storage.sql_base import SqlBase, replica_read


def _live_key(kind: KeyKind) -> sa.ColumnElement[bool]:
    return sa.and_(
        api_keys.c.key_hash == sa.bindparam("key_hash"),
        api_keys.c.kind == kind,
        api_keys.c.revoked_at.is_(None),
    )


def _users_with_org(source: Any) -> sa.Select[Any]:
    return sa.select(*USER_COLS, *ORG_COLS).select_from(
        source.outerjoin(organizations, organizations.c.id == users.c.organization_id)
    )


# The statements behind authentication run on every request: built once, with bound parameters,
# so SQLAlchemy neither rebuilds them nor recomputes their cache keys.
_AGENT_BY_KEY = (
    sa.select(*AGENT_COLS, *USER_COLS, *ORG_COLS)
    .select_from(
        api_keys.join(agents, agents.c.id == api_keys.c.principal_id)
        .join(users, users.c.id == agents.c.owner_id)
        .outerjoin(organizations, organizations.c.id == users.c.organization_id)
    )
    .where(_live_key("agent"))
)
_USER_BY_KEY = _users_with_org(users.join(api_keys, api_keys.c.principal_id == users.c.id)).where(
    _live_key("user")
)
_USER_BY_ID = _users_with_org(users).where(users.c.id == sa.bindparam("user_id"))
# ... and the one behind every page request of a signed-in person (`domain/sessions.py`).
_USER_KEY_REPLACED = sa.select(sa.func.max(api_keys.c.revoked_at)).where(
    api_keys.c.principal_id == sa.bindparam("user_id"), api_keys.c.kind == "user"
)
# ... and so do the lookups behind a person's memory list and its display fields.
_AGENTS_OF = (
    agents.select()
    .where(agents.c.owner_id == sa.bindparam("owner_id"))
    .order_by(agents.c.inserted_at)
)
_USERS_BY_IDS = users.select().where(users.c.id.in_(sa.bindparam("ids", expanding=True)))
_AGENTS_BY_IDS = (
    sa.select(*AGENT_COLS, users.c.organization_id.label("owner_org"))
    .select_from(agents.join(users, users.c.id == agents.c.owner_id))
    .where(agents.c.id.in_(sa.bindparam("ids", expanding=True)))
)


# Whose keys each kind of key is: the row a change of the principal's keys locks first.
PRINCIPALS: dict[KeyKind, sa.Table] = {"agent": agents, "user": users}


def _lock(conn: sa.Connection, principals: sa.Table, principal_id: uuid.UUID) -> bool:
    """Hold a principal's row until the transaction ends (PostgreSQL; SQLite writes one at a
    time): changes of its keys, and its deletion against its stores, take turns. Whether the
    row is there (after the wait: a deletion committed meanwhile leaves none)."""
    held = sa.select(principals.c.id).where(principals.c.id == principal_id).with_for_update()
    return conn.execute(held).first() is not None


def agent_held(agent_id: Any) -> sa.Select[Any]:
    """The agent's row, if it exists, held by the writer until it commits (`FOR KEY SHARE`,
    PostgreSQL; SQLite writes one at a time). Every write that records an agent as a memory's
    source holds it: `delete_agent` locks the row first, so such a write either commits before
    the deletion's last transaction (which then deletes or keeps its memories) or finds no
    agent and writes nothing (review17 finding 5)."""
    found = sa.select(agents.c.id).where(agents.c.id == agent_id)
    return found.with_for_update(read=True, key_share=True)


def _revoke_live_keys(
    conn: sa.Connection, principal_id: uuid.UUID, kind: KeyKind | None = None
) -> None:
    """Revoke a principal's live keys (of `kind`, when given) as of now."""
    live = [api_keys.c.principal_id == principal_id, api_keys.c.revoked_at.is_(None)]
    if kind is not None:
        live.append(api_keys.c.kind == kind)
    conn.execute(api_keys.update().where(*live).values(revoked_at=utcnow()))


class AccountsSql(SqlBase):
    """Accounts part of the SQL store."""

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

    def create_agent(self, agent: Agent, max_per_owner: int) -> bool:
        try:
            with self._write() as conn:
                # The owner's row is locked (PostgreSQL; SQLite writes one at a time) so that
                # concurrent registrations count each other.
                conn.execute(
                    sa.select(users.c.id).where(users.c.id == agent.owner_id).with_for_update()
                )
                owned = conn.execute(
                    sa.select(sa.func.count()).where(agents.c.owner_id == agent.owner_id)
                ).scalar_one()
                if owned >= max_per_owner:
                    return False
                conn.execute(agents.insert().values(**agent.__dict__))
        except sa.exc.IntegrityError as exc:
            raise Conflict("An agent with this handle exists", {"handle": agent.handle}) from exc
        return True

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

    def replace_api_keys(self, kind: KeyKind, principal_id: uuid.UUID, key_hash: str) -> None:
        with self._write() as conn:
            # Rotations of one principal take turns (PostgreSQL; SQLite writes one at a time):
            # without the lock, a rotation beside another revokes only the keys its snapshot
            # saw live, and both new keys work (review17 finding 2).
            _lock(conn, PRINCIPALS[kind], principal_id)
            _revoke_live_keys(conn, principal_id, kind)
            conn.execute(
                api_keys.insert().values(
                    key_hash=key_hash, kind=kind, principal_id=principal_id, inserted_at=utcnow()
                )
            )

    def user_key_replaced_at(self, user_id: uuid.UUID) -> datetime | None:
        with self._read() as conn:
            moment = conn.execute(_USER_KEY_REPLACED, {"user_id": user_id}).scalar()
        return cast("datetime | None", moment)

    def set_tokens_valid_after(self, user_id: uuid.UUID, moment: datetime) -> bool:
        with self._write() as conn:
            result = conn.execute(
                users.update().where(users.c.id == user_id).values(tokens_valid_after=moment)
            )
        return result.rowcount == 1

    def agent_by_key(self, key_hash: str) -> AgentContext | None:
        with self._read() as conn:
            row = conn.execute(_AGENT_BY_KEY, {"key_hash": key_hash}).first()
        if row is None:
            return None
        org = to_org(row, "o_") if row._mapping["o_id"] is not None else None
        return AgentContext(to_agent(row, "a_"), to_user(row, "u_"), org)

    def _user_context(self, query: sa.Select[Any], params: dict[str, Any]) -> UserContext | None:
        with self._read() as conn:
            row = conn.execute(query, params).first()
        if row is None:
            return None
        org = to_org(row, "o_") if row._mapping["o_id"] is not None else None
        return UserContext(to_user(row, "u_"), org)

    def user_by_key(self, key_hash: str) -> UserContext | None:
        return self._user_context(_USER_BY_KEY, {"key_hash": key_hash})

    def user_context(self, user_id: uuid.UUID) -> UserContext | None:
        return self._user_context(_USER_BY_ID, {"user_id": user_id})

    # --- memories --------------------------------------------------------------------------

    @replica_read
    def agents_of(self, owner_id: uuid.UUID) -> list[Agent]:
        with self._read() as conn:
            return [to_agent(row) for row in conn.execute(_AGENTS_OF, {"owner_id": owner_id})]

    def revoke_api_keys(self, principal_id: uuid.UUID) -> None:
        with self._write() as conn:
            _revoke_live_keys(conn, principal_id)

    def part_with_agent_memories(
        self,
        agent_id: uuid.UUID,
        tenant_id: uuid.UUID,
        batch: int,
        after: AgentMemoryPosition | None,
        *,
        by: ChangedBy | None = None,
    ) -> AgentMemoryPosition | None:
        its = sa.and_(memories.c.tenant_id == tenant_id, memories.c.source_agent_id == agent_id)
        position = sa.tuple_(memories.c.inserted_at, memories.c.id)  # `ix_memories_agent_order`
        if after is not None:
            its = sa.and_(its, position > sa.tuple_(*after))
        chosen = sa.select(memories.c.inserted_at, memories.c.id).where(its)
        with self._write() as conn:
            rows = conn.execute(chosen.order_by(*position.clauses).limit(batch)).all()
            if rows:
                # The batch as a range of the agent's index, both ends bound: by its keys, the
                # planner may walk the agent's whole index instead (every memory left, each
                # batch), and a list of keys costs a parameter each.
                last = rows[-1]
                self._part_with(conn, tenant_id, sa.and_(its, position <= sa.tuple_(*last)), by)
        return (last[0], last[1]) if len(rows) == batch else None

    def delete_agent(
        self, agent_id: uuid.UUID, tenant_id: uuid.UUID, *, by: ChangedBy | None = None
    ) -> bool:
        its = sa.and_(memories.c.tenant_id == tenant_id, memories.c.source_agent_id == agent_id)
        with self._write() as conn:
            # First: a store by the agent in flight commits before this (and is deleted or kept
            # below), or waits and then finds no agent (`sql.INSERT_MEMORY`); another deletion
            # of the agent committed first, and this one finds no agent either.
            if not _lock(conn, agents, agent_id):
                return False
            _revoke_live_keys(conn, agent_id)
            self._part_with(conn, tenant_id, its, by)
            conn.execute(
                chat_participants.delete().where(chat_participants.c.participant_id == agent_id)
            )
            conn.execute(agents.delete().where(agents.c.id == agent_id))
        return True

    def _part_with(
        self,
        conn: sa.Connection,
        tenant_id: uuid.UUID,
        its: sa.ColumnElement[bool],
        by: ChangedBy | None,
    ) -> None:
        """Delete the agent-scoped memories of `its` (an agent's memories), keep the others
        with `source_agent_id` null (history: `deleted`, `source_removed`)."""
        now, actor = utcnow(), by or SERVER
        self._delete_memories(conn, sa.and_(its, memories.c.scope == "agent"), actor)
        kept = conn.execute(
            memories.update()
            .where(its)
            .values(source_agent_id=None)
            .returning(memories.c.id, memories.c.subject_id)
        ).all()
        event = HistoryEvent.SOURCE_REMOVED
        record(conn, (history_row(tenant_id, i, s, event, actor, now) for i, s in kept))

    @replica_read
    def users_by_ids(self, ids: Iterable[uuid.UUID]) -> list[User]:
        wanted = list(set(ids))
        if not wanted:
            return []
        with self._read() as conn:
            return [to_user(row) for row in conn.execute(_USERS_BY_IDS, {"ids": wanted})]

    @replica_read
    def agents_by_ids(self, ids: Iterable[uuid.UUID]) -> list[tuple[Agent, uuid.UUID | None]]:
        wanted = list(set(ids))
        if not wanted:
            return []
        with self._read() as conn:
            rows: list[sa.Row[Any]] = list(conn.execute(_AGENTS_BY_IDS, {"ids": wanted}))
        return [(to_agent(row, "a_"), row._mapping["owner_org"]) for row in rows]
