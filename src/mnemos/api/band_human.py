"""Band's human API (`/api/v1/me/...`): people's view of memories, their profile and agents."""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

from anyio import CapacityLimiter, to_thread
from fastapi import APIRouter, Depends, Query, Response

from mnemos.api.deps import Services, services, user_caller
from mnemos.api.params import (
    ListQuery,
    SearchRequest,
    list_query,
    ranked,
    remote_embed_threads,
    search_request,
)
from mnemos.api.responses import JSONResponse, data, errors, memory_page, search_answer
from mnemos.api.rights import rights_threads
from mnemos.api.routing import MnemosRoute
from mnemos.api.schemas import (
    AgentRegisterRequest,
    CredentialsEnvelope,
    DeletedAgentEnvelope,
    MyAgentList,
    ProfileEnvelope,
    RegisteredEnvelope,
    TokensRevokedEnvelope,
    UserMemoryEnvelope,
    UserMemoryList,
    UserMemorySearchList,
    credentials_json,
    deleted_agent_json,
    memory_json,
    my_agent_list_json,
    profile_json,
    registered_json,
    tokens_revoked_json,
)
from mnemos.domain import accounts
from mnemos.domain.human import HumanListParams, HumanView
from mnemos.domain.ids import parse_uuid, try_uuid
from mnemos.domain.models import Memory, Status, UserContext

router = APIRouter(prefix="/api/v1/me", tags=["Human API"], route_class=MnemosRoute)


def human_list_params(
    scope: HumanView = Query("all"),
    chat_room_id: str | None = Query(None),
    source_agent_id: str | None = Query(None),
) -> HumanListParams:
    """The human list's own parameters (a list and a search take the same)."""
    return HumanListParams(
        scope=scope,
        chat_room_id=parse_uuid(chat_room_id, "chat_room_id") if chat_room_id else None,
        source_agent_id=parse_uuid(source_agent_id, "source_agent_id") if source_agent_id else None,
    )


def _with_display(svc: Services, ctx: UserContext, items: list[Memory]) -> list[dict[str, object]]:
    return _displayed(items, svc.human.display_fields(ctx, items))


def _displayed(
    items: list[Memory], shown: dict[uuid.UUID, dict[str, Any]]
) -> list[dict[str, object]]:
    return [{**memory_json(m), **shown[m.id]} for m in items]


@router.get(
    "/memories",
    response_model=UserMemoryList,
    responses=errors(401, 403, 422),
    summary="List memories for current user",
)
async def list_memories(
    ctx: UserContext = Depends(user_caller),
    params: HumanListParams = Depends(human_list_params),
    query: ListQuery = Depends(list_query),
    svc: Services = Depends(services),
    threads: CapacityLimiter = Depends(remote_embed_threads),
) -> JSONResponse:
    """Memories about you, of your organization, in your rooms, and private to your agents."""
    result, shown = await ranked(
        svc,
        threads,
        svc.memories.ranked_list_text(query.filters, query.page),
        partial(svc.human.check, ctx, params, query.filters),
        partial(svc.human.page_with_display, ctx, params, query.filters, query.page),
    )
    return memory_page(result, _displayed(result.items, shown))


@router.get(
    "/memories/search",
    response_model=UserMemorySearchList,
    responses=errors(401, 403, 422),
    summary="Search memories for current user by keyword and meaning",
)
async def search_memories(
    ctx: UserContext = Depends(user_caller),
    params: HumanListParams = Depends(human_list_params),
    search: SearchRequest = Depends(search_request),
    svc: Services = Depends(services),
    threads: CapacityLimiter = Depends(remote_embed_threads),
) -> JSONResponse:
    """The memories of your list with the same `scope` and filters, best first for `query`
    (modes as the agent search). A Mnemos extension: Band has no search route."""
    found, shown = await ranked(
        svc,
        threads,
        search.text_embedded_first(svc),
        partial(svc.human.check, ctx, params, search.filters),
        partial(svc.human.recall, ctx, params, *search.arguments, min_score=search.min_score),
    )
    return search_answer(found, _displayed([r.memory for r in found.items], shown))


def _one(svc: Services, ctx: UserContext, memory: Memory) -> JSONResponse:
    return data(_with_display(svc, ctx, [memory])[0])


@router.get(
    "/memories/{id}",
    response_model=UserMemoryEnvelope,
    responses=errors(401, 403, 404),
    summary="Get a memory",
)
def get_memory(
    id: str, ctx: UserContext = Depends(user_caller), svc: Services = Depends(services)
) -> JSONResponse:
    """A memory visible to you; 403 if it exists but is not."""
    return _one(svc, ctx, svc.human.get(ctx, id))


@router.delete(
    "/memories/{id}", status_code=204, responses=errors(401, 403, 404), summary="Delete a memory"
)
def delete_memory(
    id: str, ctx: UserContext = Depends(user_caller), svc: Services = Depends(services)
) -> Response:
    """Deletes for good a memory about you, or one your agent made privately."""
    svc.human.delete(ctx, id)
    return Response(status_code=204)


def _status_route(
    path: str, status: Status, summary: str, doc: str, extra: tuple[int, ...] = ()
) -> None:
    def change(
        id: str, ctx: UserContext = Depends(user_caller), svc: Services = Depends(services)
    ) -> JSONResponse:
        return _one(svc, ctx, svc.human.set_status(ctx, id, status))

    change.__doc__ = doc
    router.post(
        f"/memories/{{id}}/{path}",
        response_model=UserMemoryEnvelope,
        responses=errors(401, 403, 404, *extra),
        summary=summary,
        name=f"{path}_user_memory",
    )(change)


_status_route(
    "supersede", Status.SUPERSEDED, "Supersede a memory", "Marks a memory about you outdated."
)
_status_route(
    "archive", Status.ARCHIVED, "Archive a memory", "Hides a memory about you, keeping it."
)
_status_route(
    "restore", Status.ACTIVE, "Restore a memory", "Brings an archived memory back.", (422,)
)


@router.get(
    "/profile", response_model=ProfileEnvelope, responses=errors(401), summary="Get my profile"
)
def profile(ctx: UserContext = Depends(user_caller)) -> JSONResponse:
    """Your profile."""
    return data(profile_json(ctx.user))


@router.get("/agents", response_model=MyAgentList, responses=errors(401), summary="List my agents")
def list_agents(
    ctx: UserContext = Depends(user_caller), svc: Services = Depends(services)
) -> JSONResponse:
    """The agents you own, oldest first."""
    return JSONResponse(my_agent_list_json(svc.store.agents_of(ctx.user.id)))


@router.post(
    "/agents/register",
    status_code=201,
    response_model=RegisteredEnvelope,
    responses=errors(401, 409, 422),
    summary="Register an agent",
)
def register_agent(
    body: AgentRegisterRequest,
    ctx: UserContext = Depends(user_caller),
    svc: Services = Depends(services),
) -> JSONResponse:
    """Creates an agent you own; its API key is shown only in this answer. 409
    `agent_limit_reached` once you own `MNEMOS_MAX_AGENTS_PER_USER` agents."""
    issued = accounts.create_agent(
        svc.store,
        ctx.user.id,
        body.agent.name,
        body.agent.description,
        max_agents=svc.settings.max_agents_per_user,
    )
    return data(registered_json(issued), status=201)


@router.delete(
    "/agents/{id}",
    response_model=DeletedAgentEnvelope,
    responses=errors(401, 404),
    summary="Delete an agent",
)
async def delete_agent(
    id: str,
    ctx: UserContext = Depends(user_caller),
    svc: Services = Depends(services),
    threads: CapacityLimiter = Depends(rights_threads),
) -> JSONResponse:
    """Revokes the agent's key and deletes its private memories; its other memories stay."""
    # In a thread of its own, as an erasure: a large agent's deletion holds no request thread;
    # it writes batch by batch, so it does not close the writer gate (`api/writer_gate.py`).
    delete = partial(accounts.delete_owned_agent, svc.store, ctx.user.id, try_uuid(id))
    agent = await to_thread.run_sync(delete, limiter=threads)
    return data(deleted_agent_json(agent))


# Key rotation and token revocation are Mnemos extensions: Band's human API has no such routes
# (docs/decisions.md, "Credential rotation and revocation").


@router.post(
    "/api-key/rotate",
    response_model=CredentialsEnvelope,
    responses=errors(401),
    summary="Rotate my API key (Mnemos extension)",
)
def rotate_my_key(
    ctx: UserContext = Depends(user_caller), svc: Services = Depends(services)
) -> JSONResponse:
    """A new personal API key, shown only in this answer; your previous key is refused at once.
    Your tokens are not affected (see `/tokens/revoke`)."""
    return data(credentials_json(accounts.rotate_user_key(svc.store, ctx.user.id)))


@router.post(
    "/agents/{id}/api-key/rotate",
    response_model=CredentialsEnvelope,
    responses=errors(401, 404),
    summary="Rotate one of my agents' API key (Mnemos extension)",
)
def rotate_agent_key(
    id: str, ctx: UserContext = Depends(user_caller), svc: Services = Depends(services)
) -> JSONResponse:
    """A new API key for an agent you own, shown only in this answer; its previous key is
    refused at once and its memories are untouched. 404 for an agent that is not yours."""
    return data(credentials_json(accounts.rotate_agent_key(svc.store, try_uuid(id), ctx.user.id)))


@router.post(
    "/tokens/revoke",
    response_model=TokensRevokedEnvelope,
    responses=errors(401),
    summary="Revoke my bearer tokens (Mnemos extension)",
)
def revoke_my_tokens(
    ctx: UserContext = Depends(user_caller), svc: Services = Depends(services)
) -> JSONResponse:
    """Refuses every bearer token issued to you until now (including the one of this request);
    tokens issued afterwards work. Your API key is not affected."""
    return data(tokens_revoked_json(accounts.revoke_tokens(svc.store, ctx.user.id)))
