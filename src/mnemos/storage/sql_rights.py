"""People's rights in SQL: everything about a person by keyset, their erasure, history rows,
and retention."""

from __future__ import annotations

import uuid
from collections.abc import Generator, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mnemos.domain.ids import utcnow
from mnemos.domain.models import (
    ActorType,
    Batch,
    Change,
    ChangedBy,
    EncodedBatch,
    Erasure,
    HistoryEvent,
    Memory,
    RetentionPolicy,
    Status,
    System,
)
from mnemos.domain.tenants import Tenants
from mnemos.errors import Conflict
from mnemos.storage.history_rows import history_row, record, status_change
from mnemos.storage.rows import MEMORY_COLUMNS, to_memory
from mnemos.storage.schema import (
    UTCDateTime,
    agents,
    erasures,
    idempotency_keys,
    memories,
    memory_history,
    organizations,
    retention_policies,
    users,
)
from mnemos.storage.sql_base import SqlBase
from mnemos.storage.sql_conditions import in_tenants, read_tenants_of
from mnemos.storage.sql_export import Key, encoded_statements, read_batch

M = memories.c
H = memory_history.c
E = erasures.c

# Keyset over the subject index (`ix_memories_subject_scope_order`): one range scan per batch.
_ABOUT_ORDER = (M.scope, M.inserted_at, M.id)
_AFTER = sa.tuple_(*_ABOUT_ORDER) > sa.tuple_(
    sa.bindparam("after_scope", type_=sa.String()),
    sa.bindparam("after_at", type_=UTCDateTime()),
    sa.bindparam("after_id", type_=sa.Uuid()),
)
# What is about a person is in every tenant that holds memories about them (multi-shard),
# bound as values (`read_tenants_of`).
_ABOUT = sa.select(*MEMORY_COLUMNS).where(
    M.tenant_id.in_(sa.bindparam("tenants", expanding=True)),
    M.subject_id == sa.bindparam("subject_id"),
)
_ABOUT_FIRST = _ABOUT.order_by(*_ABOUT_ORDER).limit(sa.bindparam("limit"))
_ABOUT_NEXT = _ABOUT.where(_AFTER).order_by(*_ABOUT_ORDER).limit(sa.bindparam("limit"))


_ACTOR_TYPES = {member.value: member for member in ActorType}
_EVENTS = {member.value: member for member in HistoryEvent}


def _by(row: Any) -> ChangedBy:
    return ChangedBy(ActorType(row.actor_type), row.actor_id, row.request_id)


class RightsSql(SqlBase):
    """`RightsStore` over SQLAlchemy Core."""

    def memories_about(
        self, subject_id: uuid.UUID, *, after: Memory | None, limit: int
    ) -> Sequence[Memory]:
        params: dict[str, Any] = {"subject_id": subject_id, "limit": limit}
        statement = _ABOUT_FIRST
        if after is not None:
            statement = _ABOUT_NEXT
            params |= {"after_scope": after.scope.value, "after_at": after.inserted_at}
            params["after_id"] = after.id
        with self._read() as conn:
            params["tenants"] = read_tenants_of(conn, subject_id)
            if not params["tenants"]:
                return []
            return [to_memory(row) for row in conn.execute(statement, params)]

    def memories_about_encoded(
        self, subject_id: uuid.UUID, *, limit: int
    ) -> Generator[EncodedBatch, None, None]:
        # A connection per batch: none is held while the caller handles a batch.
        after: Key | None = None
        while True:
            with self._read() as conn:
                statements = encoded_statements(conn.dialect.name)
                found, after = read_batch(conn, statements, subject_id, after, limit)
            if found.lines:
                yield found
            if len(found.lines) < limit:
                return

    def erase_subject(self, erasure: Erasure) -> int:
        subject = erasure.subject_id
        reach = Tenants(about=subject)
        of_subject = sa.and_(in_tenants(memories, reach), M.subject_id == subject)
        with self._write() as conn:
            self._begin_erasure(conn)
            # An idempotency key's fingerprint is a digest of the request, content included:
            # the keys of the memories about the person go with them. First by the memories
            # (every key, those of memories older than history too)...
            _delete_keys(conn, reach, sa.select(M.tenant_id, M.id).where(of_subject))
            erased = self._delete_memories(conn, of_subject)
            # ... then by the `created` rows (each written with its memory and key) of those a
            # store committed between that statement and the memories' DELETE, which deleted
            # them (PostgreSQL, READ COMMITTED: each statement sees what committed before it).
            created = sa.select(H.tenant_id, H.memory_id).where(
                in_tenants(memory_history, reach),
                H.subject_id == subject,
                H.event == HistoryEvent.CREATED.value,
            )
            _delete_keys(conn, reach, created)
            conn.execute(
                memory_history.delete().where(
                    in_tenants(memory_history, reach), H.subject_id == subject
                )
            )
            erased += self._erase_stored_meanwhile(conn, reach, of_subject)
            conn.execute(
                erasures.insert().values(
                    tenant_id=subject,  # the person's own (`domain/tenants.py`)
                    id=erasure.id,
                    subject_id=subject,
                    actor_type=erasure.by.type.value,
                    actor_id=erasure.by.id,
                    request_id=erasure.by.request_id,
                    erased=erased,
                    at=erasure.at,
                )
            )
        return erased

    def _erase_stored_meanwhile(
        self, conn: Connection, reach: Tenants, of_subject: sa.ColumnElement[bool]
    ) -> int:
        """Erase, whole, the memories about the person stored while the erasure ran: at READ
        COMMITTED (PostgreSQL) one committed after the memories' DELETE began is still there,
        and the history's DELETE took its rows committed before *it* began (review17's finding
        4). Their history goes by memory id, so one stored after this read keeps all of it.
        Normally none: one index read."""
        late = conn.execute(sa.select(M.tenant_id, M.id).where(of_subject)).all()
        if not late:
            return 0
        ids = [memory_id for _, memory_id in late]
        _delete_keys(conn, reach, [tuple(row) for row in late])
        erased = self._delete_memories(conn, sa.and_(of_subject, M.id.in_(ids)))
        conn.execute(
            memory_history.delete().where(in_tenants(memory_history, reach), H.memory_id.in_(ids))
        )
        return erased

    def erasures_of(self, subject_id: uuid.UUID) -> list[Erasure]:
        query = (
            sa.select(erasures)
            .where(E.tenant_id == subject_id, E.subject_id == subject_id)
            .order_by(E.at, E.id)
        )
        with self._read() as conn:
            return [
                Erasure(row.id, row.subject_id, _by(row), row.at, row.erased)
                for row in conn.execute(query)
            ]

    def history_of(
        self, tenants: Tenants, memory_ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, list[Change]]:
        found: dict[uuid.UUID, list[Change]] = {memory_id: [] for memory_id in memory_ids}
        if not memory_ids:
            return found
        query = _history(tenants, memory_ids).order_by(H.memory_id, H.pk)
        with self._read() as conn:
            for change in _changes(conn.execute(query)):
                found[change.memory_id].append(change)
        return found

    def history_page(
        self, tenants: Tenants, memory_id: uuid.UUID, after: int, limit: int
    ) -> list[tuple[int, Change]]:
        # By the history's key from `after` on (`ix_memory_history_memory`: memory, pk): a late
        # page does not read the rows before it, as an OFFSET would.
        query = _history(tenants, [memory_id]).add_columns(H.pk).where(H.pk > after)
        with self._read() as conn:
            rows = conn.execute(query.order_by(H.pk).limit(limit)).all()
        return list(zip([row[-1] for row in rows], _changes(row[:-1] for row in rows), strict=True))

    # --- retention -------------------------------------------------------------------------

    def set_retention(self, policy: RetentionPolicy) -> bool:
        R = retention_policies.c
        mine = sa.and_(R.organization_id == policy.organization_id, R.system == policy.system.value)
        with self._write() as conn:
            exists = conn.execute(
                sa.select(organizations.c.id).where(organizations.c.id == policy.organization_id)
            ).first()
            if exists is None:
                return False
            conn.execute(retention_policies.delete().where(mine))
            if policy.days > 0:
                conn.execute(
                    retention_policies.insert().values(
                        organization_id=policy.organization_id,
                        system=policy.system.value,
                        days=policy.days,
                    )
                )
        return True

    def retention_policies(self) -> list[RetentionPolicy]:
        R = retention_policies.c
        query = sa.select(R.organization_id, R.system, R.days).order_by(R.organization_id, R.system)
        with self._read() as conn:
            return [
                RetentionPolicy(org, System(system), days)
                for org, system, days in conn.execute(query)
            ]

    def expire_memories(
        self, policy: RetentionPolicy, before: datetime, batch: int, by: ChangedBy
    ) -> Batch:
        org = policy.organization_id
        restored_since = (
            sa.select(H.pk)
            .where(
                H.tenant_id == org,
                H.memory_id == M.id,
                H.event == HistoryEvent.RESTORED.value,
                H.at >= before,
            )
            .exists()
        )
        # Only active memories expire (a superseded one stays what its agent made it: archived,
        # a restore would make it active again), and one restored within the period is kept.
        chosen = (
            sa.select(M.pk, M.updated_at)
            .where(
                _retained(org, policy.system),
                M.status == Status.ACTIVE.value,
                M.inserted_at < before,
                ~restored_since,
            )
            .limit(batch)
        )
        return self._change_retained(
            org, chosen, Status.ACTIVE, Status.ARCHIVED, HistoryEvent.EXPIRED, by
        )

    def restore_expired(
        self, organization_id: uuid.UUID, system: System, batch: int, by: ChangedBy
    ) -> Batch:
        org = organization_id
        # The last change of its status: its agent's deletion since (`source_removed`) leaves
        # the status as retention made it.
        last_event = (
            sa.select(H.event)
            .where(
                H.tenant_id == org,
                H.memory_id == M.id,
                H.event != HistoryEvent.SOURCE_REMOVED.value,
            )
            .order_by(H.pk.desc())
            .limit(1)
            .scalar_subquery()
        )
        chosen = (
            sa.select(M.pk, M.updated_at)
            .where(
                _retained(org, system),
                M.status == Status.ARCHIVED.value,
                last_event == HistoryEvent.EXPIRED.value,
            )
            .limit(batch)
        )
        try:
            return self._change_retained(
                org, chosen, Status.ARCHIVED, Status.ACTIVE, HistoryEvent.RESTORED, by
            )
        except sa.exc.IntegrityError:  # a Tuya value whose key has a newer active one
            raise Conflict("Another value of an expired memory's key is active") from None

    def _change_retained(
        self,
        org: uuid.UUID,
        chosen: sa.Select[Any],
        was: Status,
        becomes: Status,
        event: HistoryEvent,
        by: ChangedBy,
    ) -> Batch:
        """One batch of retention's changes, with their history. `chosen` selects the rows'
        `pk` and `updated_at`."""
        now = utcnow()
        with self._write() as conn:
            rows = [tuple(row) for row in conn.execute(chosen)]
            if not rows:
                return Batch(0, 0)
            # Each row as it was chosen, in the update itself: on PostgreSQL a row another
            # writer changed since (a person's archive and restore, committed while this update
            # waited for its lock) is read again after the lock and no longer matches, so the
            # conditions that chose it (`restored_since`, the last event) are never stale.
            changed = conn.execute(
                memories.update()
                .where(
                    M.tenant_id == org,
                    M.pk.in_([pk for pk, _ in rows]),
                    sa.tuple_(M.pk, M.updated_at).in_(rows),
                    M.status == was.value,
                )
                .values(status_change(becomes, now))
                .returning(M.id, M.subject_id)
            ).all()
            record(conn, (history_row(org, i, s, event, by, now) for i, s in changed))
        return Batch(len(rows), len(changed))


def _delete_keys(conn: Connection, reach: Tenants, memories_of: Any) -> None:
    conn.execute(keys_of_memories(reach, memories_of))


def keys_of_memories(reach: Tenants, memories_of: Any) -> sa.Delete:
    """The DELETE of the idempotency keys (in `reach`) of the memories `(tenant_id, id)` of
    `memories_of`: a SELECT of those columns, or a list of pairs. A lookup per memory in
    `ix_idempotency_keys_memory` (migration 0028), not a read of the tenants' every key."""
    keys = idempotency_keys.c
    return idempotency_keys.delete().where(
        in_tenants(idempotency_keys, reach),
        sa.tuple_(keys.tenant_id, keys.memory_id).in_(memories_of),
    )


def _retained(org: uuid.UUID, system: System) -> sa.ColumnElement[bool]:
    """An organization's memories of a system, as its retention reaches them: its tenant's
    organization and subject memories, and the agent-scoped ones of its people's agents."""
    its_agents = (
        sa.select(agents.c.id)
        .join(users, users.c.id == agents.c.owner_id)
        .where(users.c.organization_id == org)
    )
    return sa.and_(
        M.tenant_id == org,
        M.system == system.value,
        sa.or_(
            M.organization_id == org,
            sa.and_(M.organization_id.is_(None), M.source_agent_id.in_(its_agents)),
        ),
    )


def _history(tenants: Tenants, memory_ids: Sequence[uuid.UUID]) -> sa.Select[Any]:
    return (
        sa.select(H.memory_id, H.event, H.actor_type, H.actor_id, H.request_id, H.at)
        .add_columns(H.superseded_by)
        .where(in_tenants(memory_history, tenants), H.memory_id.in_(list(memory_ids)))
    )


def _changes(rows: Iterable[Any]) -> Iterator[Change]:
    # An export reads a history row per change of every memory: enum members by dict lookup
    # (several times faster than calling the enum class).
    for memory_id, event, kind, actor, request, at, successor in rows:
        by = ChangedBy(_ACTOR_TYPES[kind], actor, request)
        yield Change(memory_id, _EVENTS[event], by, at, successor)
