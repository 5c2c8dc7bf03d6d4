"""Chat rooms: who may create, see, join and leave them.

A room is visible only to its participants (anyone else gets 404: existence is not leaked). The
owner and admins add and remove participants; anyone may leave; the owner cannot be removed.
Only someone the caller can see (`people.sees_user` / `sees_agent`) can be added.
"""

from __future__ import annotations

import uuid
from typing import Protocol

from mnemos.domain.ids import try_uuid, utcnow
from mnemos.domain.models import ChatRoom, Participant, ParticipantType, Role, RoomStatus, RoomType
from mnemos.domain.people import Actor, sees_agent, sees_user
from mnemos.domain.ports import AccountStore, RoomStore
from mnemos.domain.values import check_optional_text
from mnemos.errors import Forbidden, NotFound, ValidationFailed, invalid_field

MAX_TITLE = 300


def not_in_room() -> ValidationFailed:
    """A store into a room its agent takes no part in (checked before the store, and by the
    store's insert itself: the agent may leave the room in between)."""
    return invalid_field("chat_room_id", "the agent is not a participant of this room")


class RoomServiceStore(RoomStore, AccountStore, Protocol):
    """Rooms, and the people and agents who take part in them."""


class RoomService:
    def __init__(self, store: RoomServiceStore):
        self.store = store

    def create(self, actor: Actor, title: str | None, room_type: RoomType) -> ChatRoom:
        check_optional_text(title, "title")
        if title is not None and len(title) > MAX_TITLE:
            raise invalid_field("title", f"must be at most {MAX_TITLE} characters")
        now = utcnow()
        room = ChatRoom(
            id=uuid.uuid4(),
            title=title,
            type=room_type,
            status=RoomStatus.ACTIVE,
            owner_type=actor.type,
            owner_id=actor.id,
            inserted_at=now,
            updated_at=now,
        )
        self.store.create_room(room)
        return room

    def _membership(self, actor: Actor, room_id: str) -> tuple[ChatRoom, Role]:
        ident = try_uuid(room_id)
        room = self.store.get_room(ident) if ident else None
        role = self.store.role_in(room.id, actor.id) if room else None
        if room is None or role is None:
            raise NotFound("Chat room not found")
        return room, role

    def get(self, actor: Actor, room_id: str) -> ChatRoom:
        return self._membership(actor, room_id)[0]

    def page(self, actor: Actor, page: int, page_size: int) -> tuple[list[ChatRoom], int]:
        return self.store.rooms_of(actor.id, page_size, (page - 1) * page_size)

    def participants(self, actor: Actor, room_id: str) -> list[Participant]:
        room, _ = self._membership(actor, room_id)
        return self.store.participants(room.id)

    def _visible_principal(self, actor: Actor, member_id: str) -> tuple[uuid.UUID, ParticipantType]:
        ident = try_uuid(member_id)
        if ident is not None:
            for user in self.store.users_by_ids([ident]):
                if sees_user(actor, user):
                    return ident, ParticipantType.USER
            for agent, owner_org in self.store.agents_by_ids([ident]):
                if sees_agent(actor, agent, owner_org):
                    return ident, ParticipantType.AGENT
        raise NotFound("No such user or agent", {"participant_id": member_id})

    def add(self, actor: Actor, room_id: str, member_id: str, role: Role | None) -> Participant:
        room, my_role = self._membership(actor, room_id)
        if my_role is Role.MEMBER:
            raise Forbidden("Only the room's owner or an admin can add participants")
        if role is Role.OWNER:
            raise invalid_field("role", "a room has one owner")
        ident, kind = self._visible_principal(actor, member_id)
        self.store.add_participant(room.id, kind, ident, role or Role.MEMBER)
        return self._find(room.id, ident)

    def remove(self, actor: Actor, room_id: str, member_id: str) -> Participant:
        room, my_role = self._membership(actor, room_id)
        ident = try_uuid(member_id)
        if ident is None:
            raise NotFound("Participant not found")
        removed = self._find(room.id, ident)
        if removed.role is Role.OWNER:
            raise Forbidden("The room's owner cannot be removed")
        if ident != actor.id and my_role is Role.MEMBER:
            raise Forbidden("Only the room's owner or an admin can remove others")
        self.store.remove_participant(room.id, ident)
        return removed

    def _find(self, room_id: uuid.UUID, member_id: uuid.UUID) -> Participant:
        for participant in self.store.participants(room_id):
            if participant.id == member_id:
                return participant
        raise NotFound("Participant not found")
