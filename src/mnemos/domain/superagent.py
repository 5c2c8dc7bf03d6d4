"""Base44 Superagent memories: what one agent remembers that applies to the calling person.

`global` memories are the agent's memories with no subject that the person may see under the
human rules (its organization memories in the person's organization, and its private memories
when the person owns it); `user` memories are the agent's subject memories about the person.
Only a person who owns the agent or shares its organization may ask.
"""

from __future__ import annotations

from typing import Protocol

from mnemos.domain.accounts import require_memory_plan
from mnemos.domain.ids import try_uuid
from mnemos.domain.models import Agent, Memory, Scope, UserContext
from mnemos.domain.ports import AccountStore, MemoryStore
from mnemos.domain.queries import Audience, MemoryQuery
from mnemos.errors import Forbidden, NotFound

LIMIT = 200


class SuperagentStore(MemoryStore, AccountStore, Protocol):
    """Memories, and agents with their owner's organization."""


class SuperagentMemories:
    def __init__(self, store: SuperagentStore):
        self.store = store

    def reachable_agent(self, ctx: UserContext, agent_id: str) -> Agent:
        require_memory_plan(ctx.user, ctx.organization)
        ident = try_uuid(agent_id)
        found = self.store.agents_by_ids([ident]) if ident else []
        if not found:
            raise NotFound("Agent not found")
        agent, owner_org = found[0]
        org = ctx.organization_id
        if agent.owner_id != ctx.user.id and (org is None or owner_org != org):
            raise Forbidden("You may not reach this agent")
        return agent

    @staticmethod
    def query(ctx: UserContext, agent: Agent) -> MemoryQuery:
        me, org, source = ctx.user.id, ctx.organization_id, agent.id
        audiences = [Audience(subject_id=me, scopes=(Scope.SUBJECT,), source_agent_id=source)]
        if org is not None:
            audiences.append(
                Audience(organization_id=org, scopes=(Scope.ORGANIZATION,), source_agent_id=source)
            )
        if agent.owner_id == me:
            audiences.append(
                Audience(source_agent_id=source, scopes=(Scope.AGENT,), without_subject=True)
            )
        return MemoryQuery(audiences=tuple(audiences))

    def recent(self, ctx: UserContext, agent_id: str) -> list[Memory]:
        """The 200 most recent, newest first."""
        agent = self.reachable_agent(ctx, agent_id)
        return list(self.store.list_memories(self.query(ctx, agent), limit=LIMIT))

    def delete(self, ctx: UserContext, agent_id: str, memory_id: str) -> None:
        """Delete one of the caller's own `user` memories; a `global` one is refused."""
        agent = self.reachable_agent(ctx, agent_id)
        ident = try_uuid(memory_id)
        memory = self.store.get_memory(ident) if ident else None
        visible = memory is not None and self.store.count_memories(
            MemoryQuery(audiences=self.query(ctx, agent).audiences, memory_id=memory.id)
        )
        if memory is None or not visible:
            raise NotFound("Memory not found")
        if not is_user_memory(ctx, memory):
            raise Forbidden("Only your own user memories can be deleted")
        self.store.delete_memory(memory.id)


def is_user_memory(ctx: UserContext, memory: Memory) -> bool:
    return memory.scope is Scope.SUBJECT and memory.subject_id == ctx.user.id
