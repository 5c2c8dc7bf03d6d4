"""Wire shapes of the Band APIs and their writers.

Each shape is declared once, as a pydantic model: OpenAPI is generated from it, and the
routes name it as their `response_model`. The JSON itself is written by one function per
shape (`..._json`), a plain dict that orjson encodes without validating it against the model:
`tests/api/test_response_shapes.py` checks each writer against its model, key for key.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from operator import attrgetter
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field

from mnemos.domain.accounts import IssuedAgent
from mnemos.domain.ids import iso
from mnemos.domain.memories import MemoryDraft
from mnemos.domain.models import Agent, Memory, User
from mnemos.domain.values import METADATA_RULE


class ErrorBody(BaseModel):
    code: str
    message: str
    request_id: str
    details: dict[str, Any] | None = None


class ErrorEnvelope(BaseModel):
    error: ErrorBody


class StoreMemoryRequest(BaseModel):
    """A memory as `band-client-rest` sends it, `{"memory": {...}}`: the domain's `MemoryDraft`
    itself, so the request's fields are declared once (unknown fields are ignored)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "memory": {
                        "content": "Every retry loop has a maximum attempt count.",
                        "system": "long_term",
                        "type": "procedural",
                        "segment": "guideline",
                        "scope": "agent",
                        "thought": "The team's review guideline",
                    }
                }
            ]
        }
    )

    memory: MemoryDraft = Field(description=f"The memory to store. `metadata`: {METADATA_RULE}")


class MemoryOut(BaseModel):
    id: str
    content: str
    thought: str | None
    system: str
    type: str
    segment: str
    scope: str
    status: str
    subject_id: str | None
    organization_id: str | None
    source_agent_id: str | None
    chat_room_id: str | None
    metadata: dict[str, Any]
    inserted_at: str
    updated_at: str


class MemoryEnvelope(BaseModel):
    data: MemoryOut


class PageMeta(BaseModel):
    has_more: bool | None = None
    limit: int | None = None
    next_cursor: str | None = None
    page: int | None = None
    page_size: int | None = None
    total_count: int | None = None
    total_pages: int | None = None


class MemoryList(BaseModel):
    data: list[MemoryOut]
    meta: PageMeta
    metadata: PageMeta


class AgentMeOut(BaseModel):
    id: str
    name: str
    description: str | None
    handle: str
    owner_uuid: str
    organization_id: str | None
    feature_flags: dict[str, bool]
    inserted_at: str
    updated_at: str


class AgentMeEnvelope(BaseModel):
    data: AgentMeOut


def _id(value: uuid.UUID | None) -> str | None:
    return str(value) if value is not None else None


# How a `Memory` field's type is written in JSON. Types orjson writes as the wire wants are
# taken as they are (a `StrEnum` member as its value); any other type fails at import.
_WRITERS: dict[Any, Callable[[Any], Any]] = {uuid.UUID: _id, uuid.UUID | None: _id, datetime: iso}
_AS_IS: tuple[Any, ...] = (str, str | None, int, bool, dict[str, Any])


def _wire(kind: Any) -> Callable[[Any], Any] | None:
    """The writer of a field type; None: the value as it is."""
    if kind in _WRITERS:
        return _WRITERS[kind]
    if kind in _AS_IS or (isinstance(kind, type) and issubclass(kind, StrEnum)):
        return None
    raise TypeError(f"no JSON form for a memory field of type {kind}: add it to _WRITERS")


_MEMORY_TYPES = get_type_hints(Memory)
# `MemoryOut`'s fields in its order (the wire order), each with its writer: derived once here,
# so a public field is declared in `MemoryOut` alone.
_MEMORY_WIRE = tuple((name, _wire(_MEMORY_TYPES[name])) for name in MemoryOut.model_fields)
_MEMORY_GET = attrgetter(*(name for name, _ in _MEMORY_WIRE))


def memory_json(memory: Memory) -> dict[str, Any]:
    """The one writer of `MemoryOut`: a plain dict that orjson encodes (no model validation)."""
    return {
        name: value if write is None else write(value)
        for (name, write), value in zip(_MEMORY_WIRE, _MEMORY_GET(memory), strict=True)
    }


def agent_json(agent: Agent, organization_id: uuid.UUID | None) -> dict[str, Any]:
    return {
        "id": str(agent.id),
        "name": agent.name,
        "description": agent.description,
        "handle": agent.handle,
        "owner_uuid": str(agent.owner_id),
        "organization_id": _id(organization_id),
        "feature_flags": {"ff_file_transfer": False, "ff_room_tasks": False, "ff_memories": True},
        "inserted_at": iso(agent.inserted_at),
        "updated_at": iso(agent.updated_at),
    }


class UserMemoryOut(MemoryOut):
    subject_name: str | None
    subject_type: str | None
    source_agent_name: str | None
    chat_room_title: str | None
    chat_room_status: str | None
    chat_room_type: str | None


class UserMemoryEnvelope(BaseModel):
    data: UserMemoryOut


class UserMemoryList(BaseModel):
    data: list[UserMemoryOut]
    meta: PageMeta
    metadata: PageMeta


class ProfileOut(BaseModel):
    id: str
    name: str
    email: str
    handle: str
    first_name: str | None
    last_name: str | None
    role: str
    organization_id: str | None
    listed_in_directory: bool
    local_credential_required: bool


class ProfileEnvelope(BaseModel):
    data: ProfileOut


class MyAgentOut(BaseModel):
    id: str
    name: str
    description: str | None
    slug: str
    is_external: bool
    inserted_at: str
    updated_at: str


class AgentListMeta(BaseModel):
    available_filters: list[dict[str, str]]
    sortable_fields: list[dict[str, str]]
    has_more: bool
    limit: int
    next_cursor: str | None
    total_count: int


class MyAgentList(BaseModel):
    data: list[MyAgentOut]
    metadata: AgentListMeta


class AgentRegister(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=2000)


class AgentRegisterRequest(BaseModel):
    agent: AgentRegister


class RegisteredAgent(BaseModel):
    id: str
    name: str
    description: str | None
    owner_id: str
    inserted_at: str


class AgentCredentials(BaseModel):
    api_key: str


class RegisteredEnvelopeData(BaseModel):
    agent: RegisteredAgent
    credentials: AgentCredentials


class RegisteredEnvelope(BaseModel):
    data: RegisteredEnvelopeData


class CredentialsEnvelope(BaseModel):
    data: AgentCredentials


class TokensRevoked(BaseModel):
    tokens_valid_after: str


class TokensRevokedEnvelope(BaseModel):
    data: TokensRevoked


class DeletedAgent(BaseModel):
    id: str
    name: str
    description: str | None
    executions_deleted: int


class DeletedAgentEnvelope(BaseModel):
    data: DeletedAgent


def my_agent_json(agent: Agent) -> dict[str, Any]:
    return {
        "id": str(agent.id),
        "name": agent.name,
        "description": agent.description,
        "slug": agent.handle.split("/", 1)[-1],
        "is_external": True,
        "inserted_at": iso(agent.inserted_at),
        "updated_at": iso(agent.updated_at),
    }


def profile_json(user: User) -> dict[str, Any]:
    first, _, last = user.name.partition(" ")
    return {
        "id": str(user.id),
        "name": user.name,
        "email": user.email,
        "handle": user.handle,
        "first_name": first,
        "last_name": last or None,
        "role": "user",
        "organization_id": _id(user.organization_id),
        "listed_in_directory": False,
        "local_credential_required": False,
    }


def my_agent_list_json(agents: list[Agent]) -> dict[str, Any]:
    """`MyAgentList`: every agent of its owner on one page."""
    meta = {
        "available_filters": [],
        "sortable_fields": [],
        "has_more": False,
        "limit": len(agents),
        "next_cursor": None,
        "total_count": len(agents),
    }
    return {"data": [my_agent_json(agent) for agent in agents], "metadata": meta}


def registered_json(issued: IssuedAgent) -> dict[str, Any]:
    """`RegisteredEnvelopeData`: a new agent and its API key, shown this once."""
    agent = issued.agent
    return {
        "agent": {
            "id": str(agent.id),
            "name": agent.name,
            "description": agent.description,
            "owner_id": str(agent.owner_id),
            "inserted_at": iso(agent.inserted_at),
        },
        "credentials": credentials_json(issued.api_key),
    }


def credentials_json(api_key: str) -> dict[str, Any]:
    """`AgentCredentials`."""
    return {"api_key": api_key}


def tokens_revoked_json(valid_after: datetime) -> dict[str, Any]:
    """`TokensRevoked`."""
    return {"tokens_valid_after": iso(valid_after)}


def deleted_agent_json(agent: Agent) -> dict[str, Any]:
    """`DeletedAgent`."""
    return {
        "id": str(agent.id),
        "name": agent.name,
        "description": agent.description,
        "executions_deleted": 0,
    }


# --- search (docs/search.md) -------------------------------------------------------------------


class SearchMeta(BaseModel):
    mode: str = Field(
        description="The mode that ranked the answer (`keyword` or `semantic` when hybrid "
        "answered with one leg)"
    )
    limit: int
    min_score: float | None = Field(
        None, description="The similarity floor asked for (absent: none)", ge=0, le=1
    )
    requested_mode: str | None = Field(None, description="Set when the mode asked for was not used")
    fallback: str | None = Field(
        None,
        description="Why the requested mode was not used: the failing leg's error code "
        "(`embedder_unavailable`, `search_too_expensive`, `other_model_indexed`) or `no embedder`",
    )
    note: str | None = Field(
        None,
        description="Why a semantic search found nothing (`other_model_indexed`: the memories "
        "hold vectors of another embedder's model only)",
    )
    has_more: bool
    next_cursor: str | None = Field(
        description="Pass as `cursor` with the same search for the next page (null: no more)"
    )


class ScoredMemoryOut(MemoryOut):
    score: float = Field(description="Higher is better; comparable only within one answer")


class MemorySearchList(BaseModel):
    data: list[ScoredMemoryOut]
    meta: SearchMeta


class ScoredUserMemoryOut(UserMemoryOut):
    score: float = Field(description="Higher is better; comparable only within one answer")


class UserMemorySearchList(BaseModel):
    data: list[ScoredUserMemoryOut]
    meta: SearchMeta
