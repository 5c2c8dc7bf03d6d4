"""Rows to domain objects and back."""

from __future__ import annotations

import dataclasses
import json
import logging
import typing
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from mnemos.domain.models import Agent, Memory, Organization, User
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


# Every field of `Memory` is the column of the same name, read and written in the dataclass's
# order; the table's other columns (`pk`, `search_text`, `tuya_slot`) are storage's own.
MEMORY_FIELDS = tuple(field.name for field in dataclasses.fields(Memory))
MEMORY_COLUMNS = [memories.c[name] for name in MEMORY_FIELDS]
_ENUMS: dict[str, type[StrEnum]] = {
    name: kind
    for name, kind in typing.get_type_hints(Memory).items()
    if isinstance(kind, type) and issubclass(kind, StrEnum)
}


def _empty_if_null(value: Any) -> Any:
    return value or {}


# How a stored value becomes a field value, by position in `MEMORY_COLUMNS`; fields not listed
# are taken as read. Enum members by stored value: a dict lookup, several times faster than
# calling the enum class.
_READERS: tuple[tuple[int, Callable[[Any], Any]], ...] = tuple(
    (index, {member.value: member for member in _ENUMS[name]}.__getitem__)
    if name in _ENUMS
    else (index, _empty_if_null)
    for index, name in enumerate(MEMORY_FIELDS)
    if name in _ENUMS or name == "metadata"
)


def memory_values(memory: Memory) -> dict[str, Any]:
    """The row of a memory: its fields (enums as their values) and the search index text."""
    values = {name: getattr(memory, name) for name in MEMORY_FIELDS}
    for name in _ENUMS:
        values[name] = values[name].value
    values["search_text"] = index_text(memory.content)
    return values


def to_memory(row: Sequence[Any]) -> Memory:
    """A memory from a row of `MEMORY_COLUMNS` (the hot path of every list: positional reads)."""
    values = list(row)
    for index, read in _READERS:
        values[index] = read(values[index])
    return Memory(*values)


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
