"""The entities of docs/design.md and the memory taxonomy."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, NamedTuple, TypeVar

from mnemos.errors import invalid_field


class System(StrEnum):
    SENSORY = "sensory"
    WORKING = "working"
    LONG_TERM = "long_term"


class MemoryType(StrEnum):
    ICONIC = "iconic"
    ECHOIC = "echoic"
    HAPTIC = "haptic"
    EPISODIC = "episodic"
    SEMANTIC = "semantic"
    PROCEDURAL = "procedural"


class Segment(StrEnum):
    USER = "user"
    AGENT = "agent"
    TOOL = "tool"
    GUIDELINE = "guideline"


class Scope(StrEnum):
    AGENT = "agent"
    SUBJECT = "subject"
    ORGANIZATION = "organization"


class Status(StrEnum):
    ACTIVE = "active"
    SUPERSEDED = "superseded"
    ARCHIVED = "archived"


_SENSORY_TYPES = (MemoryType.ICONIC, MemoryType.ECHOIC, MemoryType.HAPTIC)
_COGNITIVE_TYPES = (MemoryType.EPISODIC, MemoryType.SEMANTIC, MemoryType.PROCEDURAL)

# The guide allows only `episodic` for `working`, but band-sdk's own validator accepts all
# three cognitive types there, and the real client wins (see docs/decisions.md).
VALID_TYPES: dict[System, tuple[MemoryType, ...]] = {
    System.SENSORY: _SENSORY_TYPES,
    System.WORKING: _COGNITIVE_TYPES,
    System.LONG_TERM: _COGNITIVE_TYPES,
}

E = TypeVar("E", bound=StrEnum)


def parse_enum(enum: type[E], value: str, field_name: str, also: tuple[str, ...] = ()) -> E:
    """Parse a caller-supplied enum value, or fail with `validation_failed` naming the field
    and every value it takes (`also`: those the caller handled before, as a filter's `all`)."""
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join([*(member.value for member in enum), *also])
        raise invalid_field(field_name, f"must be one of: {allowed}") from None


@dataclass(frozen=True)
class Organization:
    id: uuid.UUID
    name: str
    memory_enabled: bool = True


@dataclass(frozen=True)
class User:
    id: uuid.UUID
    name: str
    email: str
    handle: str
    organization_id: uuid.UUID | None
    memory_enabled: bool
    inserted_at: datetime
    updated_at: datetime
    # Bearer tokens issued at or before this moment are refused; None: no revocation yet.
    tokens_valid_after: datetime | None = None


@dataclass(frozen=True)
class Agent:
    id: uuid.UUID
    name: str
    description: str | None
    owner_id: uuid.UUID
    handle: str
    inserted_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class AgentContext:
    """An authenticated agent with what its rights depend on: its owner and organization."""

    agent: Agent
    owner: User
    organization: Organization | None

    @property
    def organization_id(self) -> uuid.UUID | None:
        return self.organization.id if self.organization else None


@dataclass(frozen=True)
class UserContext:
    """An authenticated person and their organization."""

    user: User
    organization: Organization | None

    @property
    def organization_id(self) -> uuid.UUID | None:
        return self.organization.id if self.organization else None


@dataclass(frozen=True)
class Memory:
    id: uuid.UUID
    content: str
    thought: str | None
    system: System
    type: MemoryType
    segment: Segment
    scope: Scope
    subject_id: uuid.UUID | None
    organization_id: uuid.UUID | None
    source_agent_id: uuid.UUID | None
    chat_room_id: uuid.UUID | None
    metadata: dict[str, Any]
    status: Status
    inserted_at: datetime
    updated_at: datetime
    tenant_id: uuid.UUID  # whose shard it is on (`domain/tenants.py`); not public


class RoomType(StrEnum):
    DIRECT = "direct"
    GROUP = "group"
    TASK = "task"


class RoomStatus(StrEnum):
    ACTIVE = "active"
    ARCHIVED = "archived"
    CLOSED = "closed"


class Role(StrEnum):
    OWNER = "owner"
    ADMIN = "admin"
    MEMBER = "member"


class ParticipantType(StrEnum):
    USER = "User"
    AGENT = "Agent"


@dataclass(frozen=True)
class ChatRoom:
    id: uuid.UUID
    title: str | None
    type: RoomType
    status: RoomStatus
    owner_type: ParticipantType
    owner_id: uuid.UUID
    inserted_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class Participant:
    """A member of a room, with the display fields of the person or agent behind it."""

    chat_room_id: uuid.UUID
    type: ParticipantType
    id: uuid.UUID
    role: Role
    name: str
    handle: str
    description: str | None = None


# --- people's rights: who changed a memory, and what ------------------------------------------


class ActorType(StrEnum):
    """Who makes a change: an agent, a person, the operator (`mnemos admin`), a Tuya project,
    or the server itself (retention)."""

    AGENT = "agent"
    USER = "user"
    OPERATOR = "operator"
    TUYA = "tuya"
    SERVER = "server"


@dataclass(frozen=True)
class ChangedBy:
    """The actor of a change and the request that made it (written into the history)."""

    type: ActorType
    id: str | None = None
    request_id: str | None = None


class HistoryEvent(StrEnum):
    CREATED = "created"
    SUPERSEDED = "superseded"
    ARCHIVED = "archived"
    RESTORED = "restored"
    DELETED = "deleted"
    EXPIRED = "expired"  # archived by the organization's retention
    SOURCE_REMOVED = "source_removed"  # its agent was deleted: `source_agent_id` became null


@dataclass(frozen=True)
class Change:
    """One history row of a memory: never its content."""

    memory_id: uuid.UUID
    event: HistoryEvent
    by: ChangedBy
    at: datetime
    superseded_by: uuid.UUID | None = None


class Batch(NamedTuple):
    """One transaction of a change made in batches: how many memories it chose, and how many
    of those it changed (fewer when another writer changed some first). A change is done when a
    batch chooses fewer than it may; how many it changed says nothing of what is left."""

    chosen: int
    changed: int


@dataclass(frozen=True)
class RetentionPolicy:
    """An organization keeps its memories of `system` (working or sensory) for `days`."""

    organization_id: uuid.UUID
    system: System
    days: int


@dataclass(frozen=True)
class Erasure:
    """An erasure of what is about a person: who asked, when, how many (no content)."""

    id: uuid.UUID
    subject_id: uuid.UUID
    by: ChangedBy
    at: datetime
    erased: int = 0


Owners = tuple[uuid.UUID | None, uuid.UUID | None, uuid.UUID | None]
"""A memory's subject, source agent and chat room: what its display names depend on."""


@dataclass(frozen=True)
class EncodedBatch:
    """A batch of an export as the database wrote it (no domain object per memory): per memory,
    one JSON object, the memory in the wire form of `Memory` with its `"history"` (the wire form
    of its `Change`s) last, and the key of its owners (for display names); `owners` maps each
    key of the batch to its subject, source agent and chat room. Lines and keys are UTF-8, as
    the database sent them."""

    lines: list[bytes]
    keys: list[bytes]
    owners: dict[bytes, Owners]
