"""Band's agent memory API (`/api/v1/agent/...`), as `band-client-rest` calls it."""

from __future__ import annotations

from functools import partial

from anyio import CapacityLimiter
from fastapi import APIRouter, Depends, Header, Query

from mnemos.api.deps import Services, agent_caller, services
from mnemos.api.params import (
    ListQuery,
    SearchRequest,
    list_query,
    ranked,
    remote_embed_threads,
    search_request,
)
from mnemos.api.responses import JSONResponse, data, errors, memory_page, search_answer
from mnemos.api.routing import MnemosRoute
from mnemos.api.schemas import (
    AgentMeEnvelope,
    MemoryEnvelope,
    MemoryList,
    MemorySearchList,
    StoreMemoryRequest,
    agent_json,
    memory_json,
)
from mnemos.domain.ids import parse_uuid
from mnemos.domain.memories import AgentListParams, ScopeFilter, Whose
from mnemos.domain.models import AgentContext, Status

router = APIRouter(prefix="/api/v1/agent", tags=["Agent API"], route_class=MnemosRoute)


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
    memory = svc.memories.store_as_agent(ctx, body.memory, idempotency_key)
    return data(memory_json(memory), status=201)


@router.get(
    "/memories",
    response_model=MemoryList,
    responses=errors(401, 403, 422),
    summary="List memories",
)
async def list_memories(
    ctx: AgentContext = Depends(agent_caller),
    query: ListQuery = Depends(list_query),
    memory_scope: Whose = Query("me", description="Whose memories"),
    scope: ScopeFilter | None = Query(None),
    subject_id: str | None = Query(None),
    svc: Services = Depends(services),
    threads: CapacityLimiter = Depends(remote_embed_threads),
) -> JSONResponse:
    """Lists memories accessible to the agent (`memory_scope` whose, `scope` which)."""
    params = _list_params(memory_scope, scope, subject_id)
    memories = svc.memories
    page = await ranked(
        svc,
        threads,
        memories.ranked_list_text(query.filters, query.page),
        partial(memories.checked_query, ctx, params, query.filters),
        partial(memories.list_as_agent, ctx, params, query.filters, query.page),
    )
    return memory_page(page)


@router.get(
    "/memories/search",
    response_model=MemorySearchList,
    responses=errors(401, 403, 422),
    summary="Search memories by keyword and meaning",
)
async def search_memories(
    ctx: AgentContext = Depends(agent_caller),
    search: SearchRequest = Depends(search_request),
    memory_scope: Whose = Query("me", description="Whose memories"),
    scope: ScopeFilter | None = Query(None),
    subject_id: str | None = Query(None),
    svc: Services = Depends(services),
    threads: CapacityLimiter = Depends(remote_embed_threads),
) -> JSONResponse:
    """The memories of the list with the same `memory_scope`, `scope` and filters, best first
    for `query`: `hybrid` fuses keyword and meaning, `semantic` ranks by meaning only (422
    `semantic_search_disabled` when the server has no embedder), `keyword` by words only.
    A Mnemos extension: Band has no search route."""
    params = _list_params(memory_scope, scope, subject_id)
    memories = svc.memories
    found = await ranked(
        svc,
        threads,
        search.text_embedded_first(svc),
        partial(memories.checked_query, ctx, params, search.filters),
        partial(
            memories.recall_as_agent, ctx, params, *search.arguments, min_score=search.min_score
        ),
    )
    return search_answer(found)


def _list_params(
    memory_scope: Whose, scope: ScopeFilter | None, subject_id: str | None
) -> AgentListParams:
    return AgentListParams(
        memory_scope=memory_scope,
        scope=scope,
        subject_id=parse_uuid(subject_id, "subject_id") if subject_id is not None else None,
    )


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


def _status_route(action: str, status: Status, summary: str, doc: str) -> None:
    def change(
        id: str, ctx: AgentContext = Depends(agent_caller), svc: Services = Depends(services)
    ) -> JSONResponse:
        return data(memory_json(svc.memories.set_status_as_agent(ctx, id, status)))

    change.__doc__ = doc
    router.post(
        f"/memories/{{id}}/{action}",
        response_model=MemoryEnvelope,
        responses=errors(401, 403, 404),
        summary=summary,
        name=f"{action}_agent_memory",
    )(change)


_status_route(
    "supersede",
    Status.SUPERSEDED,
    "Supersede a memory",
    "Marks a memory outdated or wrong. Only the agent that stored it may.",
)
_status_route(
    "archive",
    Status.ARCHIVED,
    "Archive a memory",
    "Marks a memory valid but not needed now. Only the agent that stored it may.",
)


@router.get("/me", response_model=AgentMeEnvelope, responses=errors(401), summary="Current agent")
def agent_me(ctx: AgentContext = Depends(agent_caller)) -> JSONResponse:
    """The authenticated agent's profile."""
    return data(agent_json(ctx.agent, ctx.organization_id))
