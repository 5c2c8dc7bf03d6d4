"""Who may read and change which memories: every visibility rule of every API family, as data.

Each rule answers "which audiences may this actor read / change" (see `queries.Audience`). Lists
run the audiences as a query; a get or a change asks the same audiences about one memory, either
in Python (`admitted`, for audiences that pin only the memory's own columns) or as the list
query narrowed to that memory (`shows`). No API family writes a visibility rule of its own.

- An agent reads what it stored, and the organization and subject memories of its organization;
  it changes what it stored.
- A person reads (a) subject memories about them, (b) organization memories of their
  organization, (c) memories made in rooms they take part in by agents of their organization,
  except the agent-scoped ones of agents they don't own, (d) the agent-scoped memories of their
  agents; they change (a) and (d).
- Superagent shows a person one agent's memories among those: the person's (a) by that agent,
  and its memories with no subject among (b) and (d).
- A Tuya call reads the device's subject memories in the project's organization, and the
  device's agent-scoped memories of the role's agent.

Each audience names its tenant (`domain/tenants.py`): the caller's, or for what is about a
person, none (the tenants holding memories about them: a multi-shard read).

Memory access also needs a plan: `plan_allows` is the one rule, for every family.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from mnemos.domain.models import (
    Agent,
    AgentContext,
    Memory,
    Organization,
    Scope,
    Status,
    User,
    UserContext,
)
from mnemos.domain.ports import MemoryStore
from mnemos.domain.queries import ALL_STATUSES, Audience, MemoryQuery
from mnemos.domain.tenants import agent_tenant, person_tenant
from mnemos.errors import OrgScopeRequiresOrganization, PlanRequired, SubjectIdRequired

# --- plans -----------------------------------------------------------------------------------


def plan_allows(*accounts: User | Organization) -> bool:
    """Memory access needs every account that holds the caller to include it."""
    return all(account.memory_enabled for account in accounts)


def person_plan_allows(user: User, organization: Organization | None) -> bool:
    """The person's plan, and their organization's if they have one, include memory access."""
    return plan_allows(user, *((organization,) if organization is not None else ()))


def require_memory_plan(user: User, organization: Organization | None) -> None:
    """The person's plan, and their organization's if they have one (403 `plan_required`)."""
    if not person_plan_allows(user, organization):
        raise PlanRequired()


# --- checking one memory ---------------------------------------------------------------------


def admitted(audiences: tuple[Audience, ...], memory: Memory) -> bool:
    """Whether a memory falls in one of the audiences, decided from its own columns (audiences
    that pin a room membership or an agent's owner need the store: use `shows`)."""
    return any(_admits(audience, memory) for audience in audiences)


def _admits(audience: Audience, memory: Memory) -> bool:
    if audience.room_member_user_id is not None or audience.source_agent_owner_id is not None:
        raise ValueError("this audience needs the store to decide")
    pinned = (
        (audience.source_agent_id, memory.source_agent_id),
        (audience.organization_id, memory.organization_id),
        (audience.subject_id, memory.subject_id),
        (audience.chat_room_id, memory.chat_room_id),
        (audience.tenant_id, memory.tenant_id),
    )
    return (
        (audience.scopes is None or memory.scope in audience.scopes)
        and all(want is None or want == have for want, have in pinned)
        and not (audience.without_subject and memory.subject_id is not None)
    )


def shows(
    store: MemoryStore,
    audiences: tuple[Audience, ...],
    memory_id: uuid.UUID,
    statuses: tuple[Status, ...] = ALL_STATUSES,
) -> bool:
    """Whether the list of `audiences` (with `statuses`) holds this memory."""
    query = MemoryQuery(audiences=audiences, statuses=statuses, memory_id=memory_id)
    return store.count_memories(query) > 0


# --- agents (Band agent API) -----------------------------------------------------------------


def agent_reads(ctx: AgentContext) -> tuple[Audience, ...]:
    """Its own memories, and the organization and subject memories of its organization."""
    tenant = agent_tenant(ctx)
    own = Audience(source_agent_id=ctx.agent.id, tenant_id=tenant)
    org = ctx.organization_id
    if org is None:
        return (own,)
    shared = Audience(
        organization_id=org, scopes=(Scope.ORGANIZATION, Scope.SUBJECT), tenant_id=tenant
    )
    return (own, shared)


def agent_changes(ctx: AgentContext) -> tuple[Audience, ...]:
    """Only the storing agent supersedes or archives."""
    return (Audience(source_agent_id=ctx.agent.id, tenant_id=agent_tenant(ctx)),)


def agent_list(
    ctx: AgentContext, memory_scope: str, scope: str | None, subject_id: uuid.UUID | None
) -> tuple[tuple[Audience, ...], uuid.UUID | None]:
    """What `GET /api/v1/agent/memories` returns (docs/design.md's table, every row a narrowing
    of `agent_reads`): the audiences, and the subject the list is further narrowed to."""
    me, tenant = ctx.agent.id, agent_tenant(ctx)
    wanted = None if scope in (None, "all") else Scope(scope)
    if memory_scope == "me":
        own = Audience(source_agent_id=me, scopes=(wanted,) if wanted else None, tenant_id=tenant)
        return (own,), subject_id
    org = ctx.organization_id
    if org is None:
        raise OrgScopeRequiresOrganization(
            "memory_scope 'org' requires the agent's owner to belong to an organization"
        )
    shared = Audience(organization_id=org, scopes=(Scope.ORGANIZATION,), tenant_id=tenant)
    if scope is None or wanted is Scope.ORGANIZATION:
        return (shared,), subject_id
    if wanted is Scope.AGENT:
        return (Audience(source_agent_id=me, scopes=(Scope.AGENT,), tenant_id=tenant),), subject_id
    if wanted is Scope.SUBJECT:
        if subject_id is None:
            raise SubjectIdRequired("scope 'subject' requires subject_id")
        return (_about(org, subject_id),), subject_id
    # all: organization memories, this agent's own, and the named subject's
    audiences: tuple[Audience, ...] = (shared, Audience(source_agent_id=me, tenant_id=tenant))
    if subject_id is not None:
        audiences += (_about(org, subject_id),)
    return audiences, None


def _about(org: uuid.UUID, subject_id: uuid.UUID) -> Audience:
    return Audience(
        organization_id=org, scopes=(Scope.SUBJECT,), subject_id=subject_id, tenant_id=org
    )


# --- people (Band human API) -----------------------------------------------------------------

# Up to this many rooms or agents, each gets its own newest-first index walk; past it, one
# branch matches them all through a subquery.
MAX_BRANCHES = 64


@dataclass(frozen=True)
class Reach:
    """The rooms a person takes part in and the agents they own, when known in advance."""

    rooms: tuple[uuid.UUID, ...] | None = None
    agents: tuple[uuid.UUID, ...] | None = None


def human_audiences(ctx: UserContext, scope: str, reach: Reach = Reach()) -> tuple[Audience, ...]:
    """The branches of (a)-(d) that a `scope` (`about_me`, `organization`, `room`, `all`) asks
    for; `reach` only changes how the branches are written, never what they match."""
    me, org, tenant = ctx.user.id, ctx.organization_id, person_tenant(ctx)
    about_me = Audience(subject_id=me, scopes=(Scope.SUBJECT,))  # every tenant's
    agent_scope = (Scope.AGENT,)
    if reach.agents is not None and len(reach.agents) <= MAX_BRANCHES:
        mine = tuple(
            Audience(source_agent_id=a, scopes=agent_scope, tenant_id=tenant) for a in reach.agents
        )
    else:
        mine = (Audience(source_agent_owner_id=me, scopes=agent_scope, tenant_id=tenant),)
    shared = (
        (Audience(organization_id=org, scopes=(Scope.ORGANIZATION,), tenant_id=org),) if org else ()
    )
    in_rooms: tuple[Audience, ...] = ()
    room_scopes = (Scope.SUBJECT, Scope.ORGANIZATION)
    if org and reach.rooms is not None and len(reach.rooms) <= MAX_BRANCHES:
        in_rooms = tuple(
            Audience(chat_room_id=r, organization_id=org, scopes=room_scopes, tenant_id=org)
            for r in reach.rooms
        )
    elif org:
        in_rooms = (
            Audience(
                room_member_user_id=me, organization_id=org, scopes=room_scopes, tenant_id=org
            ),
        )
    if scope == "about_me":
        return (about_me,)
    if scope == "organization":
        return shared
    if scope == "room":
        own_in_rooms = Audience(
            room_member_user_id=me, source_agent_owner_id=me, scopes=agent_scope, tenant_id=tenant
        )
        return (*in_rooms, own_in_rooms)
    return (about_me, *shared, *in_rooms, *mine)


def human_changes(
    ctx: UserContext, agents: tuple[uuid.UUID, ...] | None = None
) -> tuple[Audience, ...]:
    """(a) memories about the person and (d) the agent-scoped memories of their agents; with
    `agents` (the ids of the agents they own) every branch pins a memory's own columns, so
    `admitted` can decide without the store."""
    me, tenant = ctx.user.id, person_tenant(ctx)
    about_me = Audience(subject_id=me, scopes=(Scope.SUBJECT,))  # every tenant's
    agent_scope = (Scope.AGENT,)
    if agents is None:
        return (about_me, Audience(source_agent_owner_id=me, scopes=agent_scope, tenant_id=tenant))
    return (
        about_me,
        *(Audience(source_agent_id=a, scopes=agent_scope, tenant_id=tenant) for a in agents),
    )


# --- people's rights -------------------------------------------------------------------------


def about(person_id: uuid.UUID) -> Audience:
    """What is about a person, for their rights (count, export, erase): every memory whose
    subject they are, any scope and status, in every tenant that holds some. Memories their
    agents stored about others are not."""
    return Audience(subject_id=person_id)


# --- Superagent ------------------------------------------------------------------------------


def superagent_audiences(ctx: UserContext, agent: Agent) -> tuple[Audience, ...]:
    """The agent's `user` memories (about the person) and its `global` ones (no subject, among
    what the person sees); the person may delete only the first (`is_user_memory`)."""
    me, org, source = ctx.user.id, ctx.organization_id, agent.id
    audiences = [Audience(subject_id=me, scopes=(Scope.SUBJECT,), source_agent_id=source)]
    if org is not None:
        audiences.append(
            Audience(
                organization_id=org,
                scopes=(Scope.ORGANIZATION,),
                source_agent_id=source,
                tenant_id=org,
            )
        )
    if agent.owner_id == me:
        audiences.append(
            Audience(
                source_agent_id=source,
                scopes=(Scope.AGENT,),
                without_subject=True,
                tenant_id=person_tenant(ctx),
            )
        )
    return tuple(audiences)


def is_user_memory(ctx: UserContext, memory: Memory) -> bool:
    """A Superagent `user` memory: a subject memory about the caller."""
    return memory.scope is Scope.SUBJECT and memory.subject_id == ctx.user.id


# --- Tuya devices ----------------------------------------------------------------------------


def device_audiences(
    organization_id: uuid.UUID, subject_id: uuid.UUID, role_agent_id: uuid.UUID | None
) -> tuple[Audience, ...]:
    """The device's global memory (its subject memories in the project's organization) and, for
    a role, the role agent's private memories of the device."""
    shared = Audience(
        organization_id=organization_id,
        scopes=(Scope.SUBJECT,),
        subject_id=subject_id,
        tenant_id=organization_id,
    )
    if role_agent_id is None:
        return (shared,)
    private = Audience(
        source_agent_id=role_agent_id,
        scopes=(Scope.AGENT,),
        subject_id=subject_id,
        tenant_id=organization_id,
    )
    return (shared, private)
