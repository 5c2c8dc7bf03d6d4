"""Who may see whom: one rule for display fields, room invitations and agent access.

A caller (a person or an agent) sees a person who is its owner/self or in its organization, and
an agent that is itself, belongs to the same owner, or whose owner is in its organization. An
organization id of None never matches anything.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from mnemos.domain.models import Agent, AgentContext, ParticipantType, User, UserContext


@dataclass(frozen=True)
class Actor:
    """Any authenticated caller, reduced to what visibility depends on."""

    id: uuid.UUID
    type: ParticipantType
    owner_user_id: uuid.UUID
    organization_id: uuid.UUID | None


def actor_of(ctx: AgentContext | UserContext) -> Actor:
    if isinstance(ctx, AgentContext):
        return Actor(ctx.agent.id, ParticipantType.AGENT, ctx.owner.id, ctx.organization_id)
    return Actor(ctx.user.id, ParticipantType.USER, ctx.user.id, ctx.organization_id)


def _same_org(actor: Actor, other_org: uuid.UUID | None) -> bool:
    return actor.organization_id is not None and other_org == actor.organization_id


def sees_user(actor: Actor, user: User) -> bool:
    return user.id == actor.owner_user_id or _same_org(actor, user.organization_id)


def sees_agent(actor: Actor, agent: Agent, owner_org: uuid.UUID | None) -> bool:
    return (
        agent.id == actor.id or agent.owner_id == actor.owner_user_id or _same_org(actor, owner_org)
    )
