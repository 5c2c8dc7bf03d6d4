"""Who changed a memory: the actor of each change, written into the memory's history.

Every change of a memory (created, superseded, archived, restored, deleted, expired, its agent
removed) appends a history row in the same transaction as the change; the store writes it
(`by=` on every changing port method). History rows never hold content. The request id comes
from the request being served (set by the API's request-context middleware).
"""

from __future__ import annotations

import uuid
from contextvars import ContextVar

from mnemos.domain.models import (
    ActorType,
    AgentContext,
    ChangedBy,
    HistoryEvent,
    Status,
    UserContext,
)

REQUEST_ID: ContextVar[str | None] = ContextVar("mnemos_request_id", default=None)
"""The id of the request being served, if any (`X-Request-Id`)."""
REQUEST_ID_LENGTH = 128
"""The longest request id: an incoming `X-Request-ID` is kept up to this length (the API's
middleware) and every change records it (`memory_history.request_id`, `erasures.request_id`)."""


def by_agent(ctx: AgentContext) -> ChangedBy:
    return ChangedBy(ActorType.AGENT, str(ctx.agent.id), REQUEST_ID.get())


def by_user(ctx: UserContext) -> ChangedBy:
    return by_person(ctx.user.id)


def by_person(user_id: uuid.UUID) -> ChangedBy:
    return ChangedBy(ActorType.USER, str(user_id), REQUEST_ID.get())


def by_tuya(client_id: str) -> ChangedBy:
    return ChangedBy(ActorType.TUYA, client_id, REQUEST_ID.get())


def by_operator() -> ChangedBy:
    """`mnemos admin ...` on the operator's terminal."""
    return ChangedBy(ActorType.OPERATOR, None, None)


SERVER = ChangedBy(ActorType.SERVER)
"""The server itself (retention), or a direct store call with no actor (bulk loaders)."""

STATUS_EVENTS = {
    Status.SUPERSEDED: HistoryEvent.SUPERSEDED,
    Status.ARCHIVED: HistoryEvent.ARCHIVED,
    Status.ACTIVE: HistoryEvent.RESTORED,
}
"""The history event of a status change."""
