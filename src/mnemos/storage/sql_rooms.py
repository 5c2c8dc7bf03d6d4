"""Chat rooms and their participants in SQL."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa

from mnemos.domain.ids import utcnow
from mnemos.domain.models import (
    ChatRoom,
    Participant,
    ParticipantType,
    Role,
    RoomStatus,
    RoomType,
)
from mnemos.errors import Conflict
from mnemos.storage.schema import agents, chat_participants, chat_rooms, users
from mnemos.storage.sql_base import SqlBase, replica_read

P = chat_participants.c

# Built once with bound parameters: these run for every person's memory list.
_ROOMS_BY_IDS = chat_rooms.select().where(chat_rooms.c.id.in_(sa.bindparam("ids", expanding=True)))
_MEMBER_ROOMS = sa.select(P.chat_room_id).where(
    P.participant_id == sa.bindparam("member_id"),
    P.chat_room_id.in_(sa.bindparam("ids", expanding=True)),
)
_MEMBER_ROOM_IDS = (
    sa.select(P.chat_room_id)
    .where(P.participant_id == sa.bindparam("member_id"))
    .order_by(P.chat_room_id)  # one order always: a search's cursor is bound to the list
    .limit(sa.bindparam("limit", type_=sa.Integer()))
)


def to_room(row: Any) -> ChatRoom:
    m = row._mapping
    return ChatRoom(
        id=m["id"],
        title=m["title"],
        type=RoomType(m["type"]),
        status=RoomStatus(m["status"]),
        owner_type=ParticipantType(m["owner_type"]),
        owner_id=m["owner_id"],
        inserted_at=m["inserted_at"],
        updated_at=m["updated_at"],
    )


class RoomsSql(SqlBase):
    """Rooms part of the SQL store."""

    def create_room(self, room: ChatRoom) -> None:
        with self._write() as conn:
            conn.execute(chat_rooms.insert().values(**room.__dict__))
            conn.execute(
                chat_participants.insert().values(
                    id=uuid.uuid4(),
                    chat_room_id=room.id,
                    participant_type=room.owner_type.value,
                    participant_id=room.owner_id,
                    role=Role.OWNER.value,
                    inserted_at=room.inserted_at,
                )
            )

    def get_room(self, room_id: uuid.UUID) -> ChatRoom | None:
        with self._read() as conn:
            row = conn.execute(chat_rooms.select().where(chat_rooms.c.id == room_id)).first()
        return to_room(row) if row else None

    @replica_read
    def rooms_by_ids(self, ids: list[uuid.UUID]) -> list[ChatRoom]:
        if not ids:
            return []
        with self._read() as conn:
            rows = conn.execute(_ROOMS_BY_IDS, {"ids": list(set(ids))})
            return [to_room(row) for row in rows]

    def rooms_of(self, member_id: uuid.UUID, limit: int, offset: int) -> tuple[list[ChatRoom], int]:
        mine = sa.select(P.chat_room_id).where(P.participant_id == member_id)
        query = (
            chat_rooms.select()
            .where(chat_rooms.c.id.in_(mine))
            .order_by(chat_rooms.c.inserted_at.desc(), chat_rooms.c.id.desc())
            .limit(limit)
            .offset(offset)
        )
        count = (
            sa.select(sa.func.count())
            .select_from(chat_participants)
            .where(P.participant_id == member_id)
        )
        with self._read() as conn:
            return [to_room(row) for row in conn.execute(query)], int(
                conn.execute(count).scalar_one()
            )

    def member_rooms(self, member_id: uuid.UUID, room_ids: list[uuid.UUID]) -> set[uuid.UUID]:
        """Which of `room_ids` the person or agent takes part in (one query)."""
        if not room_ids:
            return set()
        params = {"member_id": member_id, "ids": list(set(room_ids))}
        with self._read() as conn:
            return {row[0] for row in conn.execute(_MEMBER_ROOMS, params)}

    @replica_read
    def member_room_ids(self, member_id: uuid.UUID, limit: int) -> list[uuid.UUID]:
        params = {"member_id": member_id, "limit": limit}
        with self._read() as conn:
            return [row[0] for row in conn.execute(_MEMBER_ROOM_IDS, params)]

    def role_in(self, room_id: uuid.UUID, member_id: uuid.UUID) -> Role | None:
        query = sa.select(P.role).where(P.chat_room_id == room_id, P.participant_id == member_id)
        with self._read() as conn:
            found = conn.execute(query).scalar_one_or_none()
        return Role(found) if found else None

    def add_participant(
        self, room_id: uuid.UUID, kind: ParticipantType, member_id: uuid.UUID, role: Role
    ) -> None:
        try:
            with self._write() as conn:
                conn.execute(
                    chat_participants.insert().values(
                        id=uuid.uuid4(),
                        chat_room_id=room_id,
                        participant_type=kind.value,
                        participant_id=member_id,
                        role=role.value,
                        inserted_at=utcnow(),
                    )
                )
        except sa.exc.IntegrityError as exc:
            raise Conflict("Already a participant", {"participant_id": str(member_id)}) from exc

    def remove_participant(self, room_id: uuid.UUID, member_id: uuid.UUID) -> bool:
        with self._write() as conn:
            result = conn.execute(
                chat_participants.delete().where(
                    P.chat_room_id == room_id, P.participant_id == member_id
                )
            )
        return result.rowcount == 1

    def participants(self, room_id: uuid.UUID) -> list[Participant]:
        people = (
            sa.select(
                P.chat_room_id,
                P.participant_type,
                P.participant_id,
                P.role,
                users.c.name,
                users.c.handle,
                sa.null().label("description"),
                P.inserted_at,
            )
            .join(users, users.c.id == P.participant_id)
            .where(P.chat_room_id == room_id)
        )
        bots = (
            sa.select(
                P.chat_room_id,
                P.participant_type,
                P.participant_id,
                P.role,
                agents.c.name,
                agents.c.handle,
                agents.c.description,
                P.inserted_at,
            )
            .join(agents, agents.c.id == P.participant_id)
            .where(P.chat_room_id == room_id)
        )
        both = sa.union_all(people, bots).subquery()
        query = sa.select(both).order_by(both.c.inserted_at, both.c.participant_id)
        with self._read() as conn:
            return [
                Participant(
                    chat_room_id=row.chat_room_id,
                    type=ParticipantType(row.participant_type),
                    id=row.participant_id,
                    role=Role(row.role),
                    name=row.name,
                    handle=row.handle,
                    description=row.description,
                )
                for row in conn.execute(query)
            ]
