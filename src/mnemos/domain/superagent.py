"""Base44 Superagent memories: what one agent remembers that applies to the calling person.

`global` memories are the agent's memories with no subject that the person may see under the
human rules (its organization memories in the person's organization, and its private memories
when the person owns it); `user` memories are the agent's subject memories about the person.
Only a person who owns the agent or shares its organization may ask. The rules themselves are
`visibility.superagent_audiences` and `people.sees_agent`.
"""

from __future__ import annotations

from typing import Protocol

from mnemos.domain.history import by_user
from mnemos.domain.ids import try_uuid
from mnemos.domain.models import Agent, Memory, Status, UserContext
from mnemos.domain.people import actor_of, sees_agent
from mnemos.domain.ports import AccountStore, MemoryStore
from mnemos.domain.queries import MemoryQuery
from mnemos.domain.tenants import person_reach
from mnemos.domain.visibility import (
    is_user_memory,
    require_memory_plan,
    shows,
    superagent_audiences,
)
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
        if not sees_agent(actor_of(ctx), agent, owner_org):
            raise Forbidden("You may not reach this agent")
        return agent

    @staticmethod
    def query(ctx: UserContext, agent: Agent) -> MemoryQuery:
        return MemoryQuery(audiences=superagent_audiences(ctx, agent))

    def recent(self, ctx: UserContext, agent_id: str) -> list[Memory]:
        """The 200 most recent, newest first."""
        agent = self.reachable_agent(ctx, agent_id)
        return list(self.store.list_memories(self.query(ctx, agent), limit=LIMIT))

    def delete(self, ctx: UserContext, agent_id: str, memory_id: str) -> None:
        """Delete one of the caller's own `user` memories; a `global` one is refused."""
        agent = self.reachable_agent(ctx, agent_id)
        ident = try_uuid(memory_id)
        memory = self.store.get_memory(ident, person_reach(ctx)) if ident else None
        # Active only, as the list shows them.
        visible = memory is not None and shows(
            self.store, superagent_audiences(ctx, agent), memory.id, (Status.ACTIVE,)
        )
        if memory is None or not visible:
            raise NotFound("Memory not found")
        if not is_user_memory(ctx, memory):
            raise Forbidden("Only your own user memories can be deleted")
        self.store.delete_memory(memory.tenant_id, memory.id, by=by_user(ctx))


__all__ = ["SuperagentMemories", "is_user_memory"]
