"""Request-scoped dependencies: the services, and who is calling."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from mnemos.api.access import act_for_tenant, authenticate
from mnemos.config import Settings
from mnemos.domain import accounts
from mnemos.domain.accounts import hash_key
from mnemos.domain.human import HumanMemoryService
from mnemos.domain.memories import MemoryService
from mnemos.domain.models import AgentContext, UserContext
from mnemos.domain.retention import RetentionService
from mnemos.domain.rights import RightsService
from mnemos.domain.rooms import RoomService
from mnemos.domain.sessions import SessionSigner
from mnemos.domain.superagent import SuperagentMemories
from mnemos.domain.tokens import TokenVerifier
from mnemos.domain.tuya import TuyaMemories
from mnemos.domain.tuya_auth import TuyaAuth
from mnemos.errors import Unauthorized
from mnemos.storage.base import Store


@dataclass
class Services:
    settings: Settings
    store: Store
    memories: MemoryService
    human: HumanMemoryService
    rights: RightsService
    rooms: RoomService
    tokens: TokenVerifier
    tuya_auth: TuyaAuth
    tuya: TuyaMemories
    superagent: SuperagentMemories
    sessions: SessionSigner
    retention: RetentionService


async def services(request: Request) -> Services:
    found: Services = request.app.state.services
    return found


api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, scheme_name="ApiKey")
bearer = HTTPBearer(auto_error=False, scheme_name="BearerJWT")


def _agent(svc: Services, key: str | None) -> AgentContext:
    if not key:
        raise Unauthorized("X-API-Key header with an agent API key is required")
    ctx = svc.store.agent_by_key(hash_key(key))
    if ctx is None:
        raise Unauthorized("Invalid API key")
    return ctx


def person_of(svc: Services, key: str | None, token: str | None) -> UserContext:
    """The person a personal API key or a bearer token names; `unauthorized` otherwise."""
    ctx: UserContext | None
    if key:
        ctx = svc.store.user_by_key(hash_key(key))
    elif token is not None:
        ctx = svc.tokens.user(token)
    else:
        raise Unauthorized("An X-API-Key or Bearer token is required")
    if ctx is None:
        raise Unauthorized("Invalid credentials")
    return ctx


def agent_identity(ctx: AgentContext) -> str:
    return f"agent:{ctx.agent.id}"


def person_identity(user_id: uuid.UUID) -> str:
    """What a person's requests are counted against."""
    return f"user:{user_id}"


def user_identity(ctx: UserContext) -> str:
    return person_identity(ctx.user.id)


def caller_identity(ctx: AgentContext | UserContext) -> str:
    return agent_identity(ctx) if isinstance(ctx, AgentContext) else user_identity(ctx)


Caller = TypeVar("Caller", AgentContext, UserContext, AgentContext | UserContext)


async def authenticated(
    request: Request,
    svc: Services,
    resolve: Callable[[], Caller],
    identity: Callable[[Caller], str],
) -> Caller:
    """The caller `resolve` finds, counted and limited as `authenticate` does; this request then
    acts for its tenant (`act_for_tenant`: a slot of the tenant's share, reads that see its
    writes). Every API dependency ends here."""
    ctx = await authenticate(request, resolve, identity)
    found: AgentContext | UserContext = ctx
    act_for_tenant(request, svc.store, found.organization_id, tenant_person(found))
    return ctx


def tenant_person(ctx: AgentContext | UserContext) -> uuid.UUID:
    """The person whose tenant a caller acts for when it has no organization: an agent's
    owner, or the person themself (`Store.act_for`)."""
    return ctx.owner.id if isinstance(ctx, AgentContext) else ctx.user.id


async def agent_caller(
    request: Request,
    key: str | None = Depends(api_key_header),
    svc: Services = Depends(services),
) -> AgentContext:
    """The agent whose key is in `X-API-Key`; person keys are refused here."""
    return await authenticated(request, svc, lambda: _agent(svc, key), agent_identity)


async def user_caller(
    request: Request,
    key: str | None = Depends(api_key_header),
    token: HTTPAuthorizationCredentials | None = Depends(bearer),
    svc: Services = Depends(services),
) -> UserContext:
    """The person behind `X-API-Key` or `Authorization: Bearer <JWT>`; agent keys are refused."""
    credentials = token.credentials if token is not None else None
    return await authenticated(
        request, svc, lambda: person_of(svc, key, credentials), user_identity
    )


def any_credential(svc: Services, key: str | None, token: str | None) -> AgentContext | UserContext:
    """An agent's key, or a person's key or token: each checked as its own API checks it."""
    credential = key or token
    if credential and credential.startswith(accounts.KEY_PREFIXES["agent"]):
        return _agent(svc, credential)
    if key or (token and token.startswith(accounts.KEY_PREFIXES["user"])):
        return person_of(svc, credential, None)
    return person_of(svc, None, token)


async def any_caller(request: Request, svc: Services) -> AgentContext | UserContext:
    """The agent or person behind `X-API-Key` or `Authorization: Bearer <key or JWT>`, for an
    endpoint that serves both kinds (MCP): counted and limited like every other caller."""
    key = await api_key_header(request)
    token = await bearer(request)
    credentials = token.credentials if token is not None else None
    return await authenticated(
        request, svc, lambda: any_credential(svc, key, credentials), caller_identity
    )
