"""What a list asks the store for, as data: who may see what (audiences) and the filters.

The domain builds these from its visibility rules; storage only translates them to SQL. An
`Audience` is one branch of an OR: a memory is visible when it matches every field the
audience sets. An audience must pin at least one owner field, so a missing organization can
never turn into "every organization".
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from mnemos.domain.models import MemoryType, Scope, Segment, Status, System, parse_enum
from mnemos.domain.search import SearchQuery


@dataclass(frozen=True)
class Audience:
    scopes: tuple[Scope, ...] | None = None
    source_agent_id: uuid.UUID | None = None
    organization_id: uuid.UUID | None = None
    subject_id: uuid.UUID | None = None
    room_member_user_id: uuid.UUID | None = None
    source_agent_owner_id: uuid.UUID | None = None
    chat_room_id: uuid.UUID | None = None
    without_subject: bool = False

    def __post_init__(self) -> None:
        pinned = (
            self.source_agent_id,
            self.organization_id,
            self.subject_id,
            self.room_member_user_id,
            self.source_agent_owner_id,
            self.chat_room_id,
        )
        if all(value is None for value in pinned):
            raise ValueError("an audience must pin an agent, organization, subject or room member")


@dataclass(frozen=True)
class MemoryQuery:
    audiences: tuple[Audience, ...]
    statuses: tuple[Status, ...] = (Status.ACTIVE,)
    system: System | None = None
    type: MemoryType | None = None
    segment: Segment | None = None
    subject_id: uuid.UUID | None = None
    source_agent_id: uuid.UUID | None = None
    chat_room_id: uuid.UUID | None = None
    search: SearchQuery | None = None
    memory_id: uuid.UUID | None = None


@dataclass(frozen=True)
class Filters:
    """The narrowing filters every memory list accepts, already parsed."""

    statuses: tuple[Status, ...] = (Status.ACTIVE,)
    system: System | None = None
    type: MemoryType | None = None
    segment: Segment | None = None
    search: SearchQuery | None = None


def status_filter(value: str | None) -> tuple[Status, ...]:
    """`status` as lists take it: active by default, or one status, or `all`."""
    if value is None:
        return (Status.ACTIVE,)
    if value == "all":
        return tuple(Status)
    return (parse_enum(Status, value, "status"),)
