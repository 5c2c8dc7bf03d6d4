"""Tuya projects, tokens, devices and role bindings in SQL."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mnemos.domain.history import SERVER
from mnemos.domain.ids import utcnow
from mnemos.domain.models import ChangedBy, HistoryEvent, Memory, Status
from mnemos.errors import Conflict
from mnemos.storage.history_rows import history_row, record, status_change
from mnemos.storage.rows import memory_values
from mnemos.storage.schema import (
    memories,
    tuya_devices,
    tuya_projects,
    tuya_roles,
    tuya_signatures,
    tuya_tokens,
)
from mnemos.storage.sql_accounts import agent_held
from mnemos.storage.sql_base import SqlBase

T = tuya_tokens.c
M = memories.c
SLOT_ATTEMPTS = 5


class TuyaSql(SqlBase):
    """Tuya part of the SQL store."""

    def create_tuya_project(self, client_id: str, secret: str, organization_id: uuid.UUID) -> None:
        with self._write() as conn:
            conn.execute(
                tuya_projects.insert().values(
                    client_id=client_id,
                    client_secret=secret,
                    organization_id=organization_id,
                    inserted_at=utcnow(),
                )
            )

    def tuya_project(self, client_id: str) -> tuple[str, uuid.UUID] | None:
        query = sa.select(tuya_projects.c.client_secret, tuya_projects.c.organization_id).where(
            tuya_projects.c.client_id == client_id
        )
        with self._read() as conn:
            row = conn.execute(query).first()
        return (row[0], row[1]) if row else None

    def save_tuya_tokens(
        self,
        client_id: str,
        pair_id: uuid.UUID,
        tokens: dict[str, tuple[str, datetime]],
        replaces: uuid.UUID | None = None,
        keep: int | None = None,
    ) -> bool:
        """Store a pair of token hashes (`{"access": (hash, expiry), "refresh": ...}`); past
        `keep` pairs of the project, its pairs of the oldest refresh tokens are dropped. False,
        and nothing stored, when the pair it `replaces` has no refresh token left: another
        refresh of it committed first (PostgreSQL: this DELETE waits for that one's, then finds
        the rows gone; SQLite writes one at a time)."""
        with self._write(mark=False) as conn:
            if replaces is not None:
                ended = conn.execute(
                    tuya_tokens.delete().where(T.pair_id == replaces).returning(T.kind)
                ).scalars()
                if "refresh" not in set(ended):
                    return False
            conn.execute(tuya_tokens.delete().where(T.expires_at < utcnow()))
            for kind, (token_hash, expires_at) in tokens.items():
                conn.execute(
                    tuya_tokens.insert().values(
                        token_hash=token_hash,
                        kind=kind,
                        pair_id=pair_id,
                        client_id=client_id,
                        expires_at=expires_at,
                    )
                )
            if keep is not None:
                newest = (
                    sa.select(T.pair_id)
                    .where(T.client_id == client_id, T.kind == "refresh")
                    .order_by(T.expires_at.desc(), T.pair_id.desc())
                    .limit(keep)
                )
                conn.execute(
                    tuya_tokens.delete().where(T.client_id == client_id, T.pair_id.not_in(newest))
                )
        return True

    def tuya_token(self, token_hash: str, kind: str) -> tuple[str, uuid.UUID, datetime] | None:
        """`(client_id, pair_id, expires_at)` of a live-or-expired token, None if unknown."""
        query = sa.select(T.client_id, T.pair_id, T.expires_at).where(
            T.token_hash == token_hash, T.kind == kind
        )
        with self._read() as conn:
            row = conn.execute(query).first()
        return (row[0], row[1], row[2]) if row else None

    def tuya_device(self, device_id: str) -> tuple[uuid.UUID, uuid.UUID] | None:
        """`(organization_id, subject_id)` of a known device."""
        query = sa.select(tuya_devices.c.organization_id, tuya_devices.c.subject_id).where(
            tuya_devices.c.device_id == device_id
        )
        with self._read() as conn:
            row = conn.execute(query).first()
        return (row[0], row[1]) if row else None

    def claim_tuya_device(
        self, device_id: str, organization_id: uuid.UUID
    ) -> tuple[uuid.UUID, uuid.UUID]:
        """The device's owner, making it this organization's if nobody has written it yet."""
        with self._write() as conn:
            conn.execute(
                self._insert_ignore(tuya_devices).values(
                    device_id=device_id,
                    organization_id=organization_id,
                    subject_id=uuid.uuid4(),
                    inserted_at=utcnow(),
                )
            )
            row = conn.execute(
                sa.select(tuya_devices.c.organization_id, tuya_devices.c.subject_id).where(
                    tuya_devices.c.device_id == device_id
                )
            ).one()
        return row[0], row[1]

    def bind_tuya_role(self, organization_id: uuid.UUID, role_id: str, agent_id: uuid.UUID) -> None:
        with self._write() as conn:
            conn.execute(
                tuya_roles.delete().where(
                    tuya_roles.c.organization_id == organization_id, tuya_roles.c.role_id == role_id
                )
            )
            conn.execute(
                tuya_roles.insert().values(
                    organization_id=organization_id, role_id=role_id, agent_id=agent_id
                )
            )

    def tuya_role_agent(self, organization_id: uuid.UUID, role_id: str) -> uuid.UUID | None:
        query = sa.select(tuya_roles.c.agent_id).where(
            tuya_roles.c.organization_id == organization_id, tuya_roles.c.role_id == role_id
        )
        with self._read() as conn:
            found: uuid.UUID | None = conn.execute(query).scalar_one_or_none()
        return found

    # --- Tuya memories ---------------------------------------------------------------------

    def put_tuya_memories(
        self, new: Sequence[tuple[Memory, str]], now: datetime, *, by: ChangedBy | None = None
    ) -> bool:
        """Insert each memory under its slot, superseding the slot's active value, atomically;
        False, and nothing written, when a role's agent they name as source is gone.

        Writers of one device wait for each other (a lock on the device's row). Should another
        path activate a value of the same slot meanwhile, the insert breaks the unique index of
        active slots and the whole write is tried again, superseding that value.
        """
        for _ in range(SLOT_ATTEMPTS):
            try:
                with self._write() as conn:
                    return self._put_slots(conn, new, now, by or SERVER)
            except sa.exc.IntegrityError:
                continue  # another path activated a value of one of the slots: again
        raise Conflict("Other writers keep changing these memory keys")

    def _put_slots(
        self, conn: Connection, new: Sequence[tuple[Memory, str]], now: datetime, by: ChangedBy
    ) -> bool:
        # The role's agent first, held until the write commits (`agent_held`): an agent deleted
        # since the role was read leaves nothing written. Before the device's lock and the
        # rows it supersedes, as `delete_agent` takes its agent's lock before its memories'.
        # Rows of one kind are locked in one order (sorted), so two writers that share some
        # never hold one each while waiting for the other's (a deadlock on PostgreSQL).
        agent_ids = {memory.source_agent_id for memory, _ in new}
        for agent_id in sorted(agent for agent in agent_ids if agent is not None):
            if conn.execute(agent_held(agent_id)).first() is None:
                return False
        by_subject: dict[tuple[uuid.UUID, uuid.UUID | None], list[str]] = {}
        successor = {(memory.subject_id, slot): memory.id for memory, slot in new}
        history = []
        for memory, slot in new:
            by_subject.setdefault((memory.tenant_id, memory.subject_id), []).append(slot)
        devices = sorted(by_subject.items(), key=lambda item: (item[0][0], str(item[0][1])))
        for (tenant, subject), slots in devices:
            # Writers of one device take turns (PostgreSQL; SQLite has one writer anyway), so
            # each supersedes what the previous one committed instead of racing it.
            lock = sa.select(tuya_devices.c.device_id).where(tuya_devices.c.subject_id == subject)
            conn.execute(lock.with_for_update())
            gone = conn.execute(
                memories.update()
                .where(M.tenant_id == tenant, M.subject_id == subject, M.tuya_slot.in_(slots))
                .where(M.status == Status.ACTIVE.value)
                .values(status_change(Status.SUPERSEDED, now))
                .returning(M.id, M.tuya_slot)
            ).all()
            superseded = HistoryEvent.SUPERSEDED
            history += [
                history_row(tenant, old, subject, superseded, by, now, successor[(subject, slot)])
                for old, slot in gone
            ]
        rows = [{**memory_values(memory), "tuya_slot": slot} for memory, slot in new]
        conn.execute(memories.insert(), rows)
        self._note_inserted(conn, rows)
        created = HistoryEvent.CREATED
        history += [history_row(m.tenant_id, m.id, m.subject_id, created, by, now) for m, _ in new]
        record(conn, history)
        return True

    def delete_tuya_memories(
        self,
        tenant_id: uuid.UUID,
        subject_id: uuid.UUID,
        slots: Sequence[str],
        prefixes: Sequence[str],
        batch: int,
        *,
        by: ChangedBy | None = None,
    ) -> int:
        """Delete every version of a subject's Tuya memories whose slot is one of `slots` or
        starts with one of `prefixes`, `batch` rows per transaction; how many were deleted."""
        matches: list[sa.ColumnElement[bool]] = [M.tuya_slot.in_(slots)] if slots else []
        matches += [M.tuya_slot.startswith(prefix, autoescape=True) for prefix in prefixes]
        if not matches:
            return 0
        mine = sa.and_(M.tenant_id == tenant_id, M.subject_id == subject_id)
        chosen = (
            sa.select(M.pk).where(mine, M.tuya_slot.is_not(None), sa.or_(*matches)).limit(batch)
        )
        deleted = 0
        while True:
            # Until a batch chooses nothing: what a batch deletes can be short of what it chose
            # (another request deleted some of its rows, or all, while it waited for them) with
            # more left after it (review17, review19).
            with self._write() as conn:
                pks = list(conn.execute(chosen).scalars())
                if pks:
                    where = sa.and_(M.tenant_id == tenant_id, M.pk.in_(pks))
                    deleted += self._delete_memories(conn, where, by or SERVER)
            if not pks:
                return deleted

    # --- replay protection -----------------------------------------------------------------

    def remember_tuya_signature(self, digest: str, expires_at: datetime) -> bool:
        """Record a request signature until `expires_at`; False if it is already recorded."""
        return self._remember_until(tuya_signatures, digest, expires_at)
