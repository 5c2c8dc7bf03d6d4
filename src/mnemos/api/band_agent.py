"""Band's agent memory API (`/api/v1/agent/...`), as `band-client-rest` calls it."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Header, Query
from fastapi.responses import JSONResponse

from mnemos.api.deps import Services, agent_caller, services
from mnemos.api.params import list_filters, page_request
from mnemos.api.responses import data, errors, memory_page
from mnemos.api.schemas import (
    AgentMeEnvelope,
    MemoryEnvelope,
    MemoryList,
    StoreMemoryRequest,
    agent_json,
    memory_json,
)
from mnemos.domain.ids import parse_uuid
from mnemos.domain.memories import AgentListParams
from mnemos.domain.models import AgentContext, Status

router = APIRouter(prefix="/api/v1/agent", tags=["Agent API"])


@router.post(
    "/memories",
    status_code=201,
    response_model=MemoryEnvelope,
    responses=errors(401, 403, 409, 413, 422),
    summary="Store a memory",
)
def store_memory(
    body: StoreMemoryRequest,
    idempotency_key: str | None = Header(None, alias="Idempotency-Key", max_length=255),
    ctx: AgentContext = Depends(agent_caller),
    svc: Services = Depends(services),
) -> JSONResponse:
    """Stores a new memory with the authenticated agent as its source.

    Send an `Idempotency-Key` to make retries safe: the same key and body within 24 hours returns
    the memory the first request stored.
    """
    memory = svc.memories.store_as_agent(ctx, body.memory.draft(), idempotency_key)
    return data(memory_json(memory), status=201)


@router.get(
    "/memories",
    response_model=MemoryList,
    responses=errors(401, 403, 422),
    summary="List memories",
)
def list_memories(
    cursor: str | None = Query(None, max_length=512, description="Opaque keyset cursor"),
    limit: int | None = Query(None, description="1-100, default 20"),
    page: int | None = Query(None, description="Deprecated offset page, from 1"),
    page_size: int | None = Query(None, description="Deprecated page size, 1-50"),
    memory_scope: Literal["me", "org"] = Query("me", description="Whose memories"),
    scope: Literal["agent", "subject", "organization", "all"] | None = Query(None),
    subject_id: str | None = Query(None),
    system: str | None = Query(None),
    type: str | None = Query(None),
    segment: str | None = Query(None),
    status: str | None = Query(None, description="active, superseded, archived or all"),
    content_query: str | None = Query(None, description="Full-text search"),
    ctx: AgentContext = Depends(agent_caller),
    svc: Services = Depends(services),
) -> JSONResponse:
    """Lists memories accessible to the agent (`memory_scope` whose, `scope` which)."""
    request = page_request(svc, cursor, limit, page, page_size)
    params = AgentListParams(
        memory_scope=memory_scope,
        scope=scope,
        subject_id=parse_uuid(subject_id, "subject_id") if subject_id is not None else None,
    )
    filters = list_filters(svc, system, type, segment, status, content_query)
    return memory_page(svc.memories.list_as_agent(ctx, params, filters, request))


@router.get(
    "/memories/{id}",
    response_model=MemoryEnvelope,
    responses=errors(401, 403, 404),
    summary="Get a memory",
)
def get_memory(
    id: str, ctx: AgentContext = Depends(agent_caller), svc: Services = Depends(services)
) -> JSONResponse:
    """A memory the agent stored, or an organization or subject memory of its organization."""
    return data(memory_json(svc.memories.get_as_agent(ctx, id)))


@router.post(
    "/memories/{id}/supersede",
    response_model=MemoryEnvelope,
    responses=errors(401, 403, 404),
    summary="Supersede a memory",
)
def supersede_memory(
    id: str, ctx: AgentContext = Depends(agent_caller), svc: Services = Depends(services)
) -> JSONResponse:
    """Marks a memory outdated or wrong. Only the agent that stored it may."""
    return data(memory_json(svc.memories.set_status_as_agent(ctx, id, Status.SUPERSEDED)))


@router.post(
    "/memories/{id}/archive",
    response_model=MemoryEnvelope,
    responses=errors(401, 403, 404),
    summary="Archive a memory",
)
def archive_memory(
    id: str, ctx: AgentContext = Depends(agent_caller), svc: Services = Depends(services)
) -> JSONResponse:
    """Marks a memory valid but not needed now. Only the agent that stored it may."""
    return data(memory_json(svc.memories.set_status_as_agent(ctx, id, Status.ARCHIVED)))


@router.get("/me", response_model=AgentMeEnvelope, responses=errors(401), summary="Current agent")
def agent_me(ctx: AgentContext = Depends(agent_caller)) -> JSONResponse:
    """The authenticated agent's profile."""
    return data(agent_json(ctx.agent, ctx.organization_id))
