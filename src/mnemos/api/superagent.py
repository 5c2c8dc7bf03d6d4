"""Base44 Superagent's memory API (`/api/agents/{agent_id}/memory`), for people only."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials
from pydantic import BaseModel

from mnemos.api.deps import Services, authenticated, bearer, services, user_identity
from mnemos.api.responses import JSONResponse, errors
from mnemos.api.routing import MnemosRoute
from mnemos.domain.accounts import hash_key
from mnemos.domain.ids import iso
from mnemos.domain.models import Memory, UserContext
from mnemos.domain.superagent import is_user_memory
from mnemos.errors import Unauthorized

router = APIRouter(prefix="/api/agents", tags=["Superagent memories"], route_class=MnemosRoute)
personal_key = APIKeyHeader(name="api_key", auto_error=False, scheme_name="PersonalApiKey")


# --- response shapes: each declared once, written by one function ----------------------------


class SuperagentMemory(BaseModel):
    id: str
    content: str
    scope: str
    user_id: str | None
    conversation_id: str | None
    created_date: str
    updated_date: str


def superagent_memory_json(ctx: UserContext, memory: Memory) -> dict[str, Any]:
    """The one writer of `SuperagentMemory`: `user` when it is about the caller, else `global`."""
    mine = is_user_memory(ctx, memory)
    return {
        "id": str(memory.id),
        "content": memory.content,
        "scope": "user" if mine else "global",
        "user_id": str(ctx.user.id) if mine else None,
        "conversation_id": str(memory.chat_room_id) if memory.chat_room_id else None,
        "created_date": iso(memory.inserted_at),
        "updated_date": iso(memory.updated_at),
    }


def _person(svc: Services, key: str | None, token: str | None) -> UserContext:
    ctx: UserContext | None = None
    if key:
        ctx = svc.store.user_by_key(hash_key(key))
    elif token is not None:
        if token.startswith("mn_"):
            ctx = svc.store.user_by_key(hash_key(token))
        else:
            ctx = svc.tokens.user(token)
    if ctx is None:
        raise Unauthorized("A personal API key or token is required")
    return ctx


async def person(
    request: Request,
    key: str | None = Depends(personal_key),
    token: HTTPAuthorizationCredentials | None = Depends(bearer),
    svc: Services = Depends(services),
) -> UserContext:
    """A person's key (`api_key` header) or token (`Authorization: Bearer`); never an agent's."""
    credentials = token.credentials if token is not None else None
    return await authenticated(request, svc, lambda: _person(svc, key, credentials), user_identity)


@router.get(
    "/{agent_id}/memory",
    response_model=list[SuperagentMemory],
    responses=errors(401, 403, 404),
    summary="List Superagent memories",
)
def list_memory(
    agent_id: str, ctx: UserContext = Depends(person), svc: Services = Depends(services)
) -> JSONResponse:
    """The agent's global memories and your own user memories: the 200 most recent, newest first."""
    rows = svc.superagent.recent(ctx, agent_id)
    return JSONResponse([superagent_memory_json(ctx, m) for m in rows])


@router.delete(
    "/{agent_id}/memory/{memory_id}",
    status_code=204,
    responses=errors(401, 403, 404),
    summary="Delete a Superagent memory",
)
def delete_memory(
    agent_id: str,
    memory_id: str,
    ctx: UserContext = Depends(person),
    svc: Services = Depends(services),
) -> Response:
    """Deletes one of your own user memories; global memories are refused (403)."""
    svc.superagent.delete(ctx, agent_id, memory_id)
    return Response(status_code=204)
