"""Rows to domain objects and back."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from mnemos.domain.models import (
    Agent,
    Memory,
    MemoryType,
    Organization,
    Scope,
    Segment,
    Status,
    System,
    User,
)
from mnemos.domain.search import index_text
from mnemos.storage.schema import agents, memories, organizations, users

log = logging.getLogger("mnemos")

# What a JSON column holds when the database has text there that no JSON decoder can read
# (nested deeper than Python's recursion limit, an integer of thousands of digits, not JSON).
UNREADABLE_JSON = {"unreadable": "the stored value is not JSON that Mnemos can read"}


def read_json(text: str | bytes | memoryview) -> Any:
    """Every engine's JSON decoder: one row's unreadable JSON becomes a marker, never an error.

    Rows written before the value rules of `domain/values.py`, or by other programs, can hold
    anything; a list that includes one must still answer. The marker is logged.
    """
    try:
        return json.loads(bytes(text) if isinstance(text, memoryview) else text)
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:100]
        log.warning("unreadable JSON in the database, answered as a marker: %s", reason)
        return dict(UNREADABLE_JSON)


# The columns a memory is read from, in the order `to_memory` unpacks them.
MEMORY_COLUMNS = [
    memories.c[name]
    for name in (
        "id",
        "content",
        "thought",
        "system",
        "type",
        "segment",
        "scope",
        "subject_id",
        "organization_id",
        "source_agent_id",
        "chat_room_id",
        "metadata",
        "status",
        "inserted_at",
        "updated_at",
    )
]
# Enum members by stored value: a dict lookup, where calling the enum class is several times slower.
_SYSTEMS = {member.value: member for member in System}
_TYPES = {member.value: member for member in MemoryType}
_SEGMENTS = {member.value: member for member in Segment}
_SCOPES = {member.value: member for member in Scope}
_STATUSES = {member.value: member for member in Status}


def memory_values(memory: Memory) -> dict[str, Any]:
    return {
        "id": memory.id,
        "content": memory.content,
        "search_text": index_text(memory.content),
        "thought": memory.thought,
        "system": memory.system.value,
        "type": memory.type.value,
        "segment": memory.segment.value,
        "scope": memory.scope.value,
        "subject_id": memory.subject_id,
        "organization_id": memory.organization_id,
        "source_agent_id": memory.source_agent_id,
        "chat_room_id": memory.chat_room_id,
        "metadata": memory.metadata,
        "status": memory.status.value,
        "inserted_at": memory.inserted_at,
        "updated_at": memory.updated_at,
    }


def to_memory(row: Sequence[Any]) -> Memory:
    """A memory from a row of `MEMORY_COLUMNS` (the hot path of every list: positional reads)."""
    (id_, content, thought, system, type_, segment, scope, subject_id, organization_id,
     source_agent_id, chat_room_id, metadata, status, inserted_at, updated_at) = row  # fmt: skip
    return Memory(
        id=id_,
        content=content,
        thought=thought,
        system=_SYSTEMS[system],
        type=_TYPES[type_],
        segment=_SEGMENTS[segment],
        scope=_SCOPES[scope],
        subject_id=subject_id,
        organization_id=organization_id,
        source_agent_id=source_agent_id,
        chat_room_id=chat_room_id,
        metadata=metadata or {},
        status=_STATUSES[status],
        inserted_at=inserted_at,
        updated_at=updated_at,
    )


def to_org(row: sa.Row[Any], prefix: str = "") -> Organization:
    m = row._mapping
    return Organization(
        id=m[f"{prefix}id"], name=m[f"{prefix}name"], memory_enabled=m[f"{prefix}memory_enabled"]
    )


def to_user(row: sa.Row[Any], prefix: str = "") -> User:
    m = row._mapping
    return User(
        id=m[f"{prefix}id"],
        name=m[f"{prefix}name"],
        email=m[f"{prefix}email"],
        handle=m[f"{prefix}handle"],
        organization_id=m[f"{prefix}organization_id"],
        memory_enabled=m[f"{prefix}memory_enabled"],
        inserted_at=m[f"{prefix}inserted_at"],
        updated_at=m[f"{prefix}updated_at"],
        tokens_valid_after=m[f"{prefix}tokens_valid_after"],
    )


def to_agent(row: sa.Row[Any], prefix: str = "") -> Agent:
    m = row._mapping
    return Agent(
        id=m[f"{prefix}id"],
        name=m[f"{prefix}name"],
        description=m[f"{prefix}description"],
        owner_id=m[f"{prefix}owner_id"],
        handle=m[f"{prefix}handle"],
        inserted_at=m[f"{prefix}inserted_at"],
        updated_at=m[f"{prefix}updated_at"],
    )


def labelled(table: sa.Table, prefix: str) -> list[sa.Label[Any]]:
    """Every column of a table, labelled with a prefix, for joins that read several tables."""
    return [column.label(f"{prefix}{column.name}") for column in table.c]


USER_COLS = labelled(users, "u_")
ORG_COLS = labelled(organizations, "o_")
AGENT_COLS = labelled(agents, "a_")
