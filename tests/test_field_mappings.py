"""Every memory field in every mapping: the model, the table, the API's request and response.

Adding a field to `Memory` must be matched by a column of the same name (and a migration) and,
unless it is listed below as internal, by `MemoryOut`; a field the client sends must also be in
`MemoryDraft` (the store request's schema). Each intentional difference is listed here, with
its reason.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import orjson

from mnemos.api.responses import JSONResponse
from mnemos.api.schemas import MemoryOut, StoreMemoryRequest, memory_json
from mnemos.domain import accounts
from mnemos.domain.ids import iso, utcnow, uuid7
from mnemos.domain.memories import MemoryDraft
from mnemos.domain.models import (
    Memory,
    MemoryType,
    ParticipantType,
    RoomType,
    Scope,
    Segment,
    Status,
    System,
)
from mnemos.domain.people import Actor
from mnemos.domain.rooms import RoomService
from mnemos.domain.tenants import Tenants
from mnemos.storage.base import Store
from mnemos.storage.rows import MEMORY_COLUMNS, memory_values
from mnemos.storage.schema import memories

# Columns of the table that are not fields of `Memory`, each kept by storage for itself.
STORAGE_ONLY_COLUMNS = {
    "pk": "the row's integer key, for the backends' physical order",
    "search_text": "the content folded for search (`domain/search.index_text`)",
    "tuya_slot": "a Tuya memory's key and scope owner, for one active value per key",
}
# Fields of `Memory` that are not in its public JSON (`MemoryOut`).
NOT_PUBLIC: dict[str, str] = {
    "tenant_id": "the shard key (`domain/tenants.py`): the organization or person it is kept for"
}
# Fields of `Memory` that the server decides, so a store request does not send them.
SERVER_SET = {
    "id": "a new UUIDv7",
    "organization_id": "the storing agent's organization, by scope",
    "source_agent_id": "the storing agent",
    "status": "every new memory is active",
    "inserted_at": "the time of the store",
    "updated_at": "the time of the store, then of each change",
    "tenant_id": "the storing agent's tenant (`domain/tenants.py`)",
}

MEMORY_FIELDS = [field.name for field in dataclasses.fields(Memory)]


def test_every_memory_field_is_a_column_and_every_column_a_field() -> None:
    columns = {column.name for column in memories.c} - set(STORAGE_ONLY_COLUMNS)
    assert set(MEMORY_FIELDS) == columns
    assert [column.name for column in MEMORY_COLUMNS] == MEMORY_FIELDS


def test_every_public_memory_field_is_in_the_response_schema() -> None:
    assert set(MemoryOut.model_fields) == set(MEMORY_FIELDS) - set(NOT_PUBLIC)


def test_the_store_request_is_the_draft_and_the_draft_is_part_of_a_memory() -> None:
    draft_fields = [field.name for field in dataclasses.fields(MemoryDraft)]
    assert StoreMemoryRequest.model_fields["memory"].annotation is MemoryDraft
    assert set(draft_fields) == set(MEMORY_FIELDS) - set(SERVER_SET)


def _distinct_memory() -> Memory:
    """A memory whose every UUID field holds a different id, so a swap would show."""
    now = utcnow()
    return Memory(
        id=uuid7(),
        content="distinct",
        thought="each id differs",
        system=System.WORKING,
        type=MemoryType.EPISODIC,
        segment=Segment.TOOL,
        scope=Scope.SUBJECT,
        subject_id=uuid.uuid4(),
        organization_id=uuid.uuid4(),
        source_agent_id=uuid.uuid4(),
        chat_room_id=uuid.uuid4(),
        metadata={"k": [1, "v"]},
        status=Status.ARCHIVED,
        inserted_at=now,
        updated_at=now,
        tenant_id=uuid.uuid4(),
    )


def test_a_row_has_every_field_by_name() -> None:
    memory = _distinct_memory()
    values = memory_values(memory)
    for name in MEMORY_FIELDS:
        expected: Any = getattr(memory, name)
        assert values[name] == expected, name


def test_the_json_of_a_memory_has_every_response_field_in_order() -> None:
    memory = _distinct_memory()
    written = memory_json(memory)
    assert list(written) == list(MemoryOut.model_fields)
    shown = MemoryOut.model_validate(written)
    assert shown.subject_id == str(memory.subject_id)
    assert shown.chat_room_id == str(memory.chat_room_id)


def test_a_memory_reads_back_field_for_field(store: Store) -> None:
    owner = accounts.create_user(store, "Ann", "ann@example.com", None).user
    agent = accounts.create_agent(store, owner.id, "Bot", None).agent  # a store's agent exists
    # ... and has a seat in the room it stores into (the insert checks both).
    actor = Actor(agent.id, ParticipantType.AGENT, owner.id, None)
    room = RoomService(store).create(actor, "Plan", RoomType.GROUP)
    memory = dataclasses.replace(_distinct_memory(), source_agent_id=agent.id, chat_room_id=room.id)
    store.insert_memory(memory)
    assert store.get_memory(memory.id, Tenants((memory.tenant_id,))) == memory
    assert store.get_memory(memory.id, Tenants((uuid.uuid4(),))) is None  # another tenant's


def test_the_wire_form_of_a_memory() -> None:
    """Enums as their values, ids as strings, times as UTC ISO 8601 with microseconds."""
    memory = _distinct_memory()
    wire = orjson.loads(JSONResponse(memory_json(memory)).body)
    assert wire["system"] == "working" and wire["status"] == "archived"
    assert wire["organization_id"] == str(memory.organization_id)
    assert wire["inserted_at"] == iso(memory.inserted_at)
