"""Builds organizations, people and agents for tests through the same domain calls as the CLI."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mnemos.domain import accounts
from mnemos.domain.ids import utcnow, uuid7
from mnemos.domain.models import Memory, MemoryType, Scope, Segment, Status, System
from mnemos.storage.base import Store


@dataclass
class Actor:
    id: str
    api_key: str
    organization_id: str | None
    owner_id: str | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {"X-API-Key": self.api_key}

    @property
    def tenant(self) -> uuid.UUID:
        """Its tenant (`domain/tenants.py`): its organization, or the person (an agent's owner)."""
        return uuid.UUID(self.organization_id or self.owner_id or self.id)


@dataclass
class World:
    store: Store
    counter: int = 0
    orgs: dict[str, str] = field(default_factory=dict)

    def org(self, name: str) -> str:
        if name not in self.orgs:
            self.orgs[name] = str(accounts.create_organization(self.store, name).id)
        return self.orgs[name]

    def user(self, name: str, org: str | None = None) -> Actor:
        self.counter += 1
        org_id = self.org(org) if org else None
        issued = accounts.create_user(
            self.store,
            name,
            f"{name.lower()}{self.counter}@example.test",
            uuid.UUID(org_id) if org_id else None,
        )
        return Actor(str(issued.user.id), issued.api_key, org_id)

    def agent(self, owner: Actor, name: str = "Agent") -> Actor:
        issued = accounts.create_agent(self.store, uuid.UUID(owner.id), name, None)
        return Actor(str(issued.agent.id), issued.api_key, owner.organization_id, owner.id)


def memory_body(content: str = "likes green tea", **fields: Any) -> dict[str, Any]:
    """A valid store body; keyword arguments override or add fields."""
    memory: dict[str, Any] = {
        "content": content,
        "system": "long_term",
        "type": "semantic",
        "segment": "user",
        "thought": "worth remembering",
    }
    memory.update(fields)
    return {"memory": memory}


def agent_memory(agent: Actor, content: str, at: datetime | None = None, **fields: Any) -> Memory:
    """A memory of `agent` as the store takes it directly (`Store.replace_memories`): agent
    scope, long-term semantic, active, in the agent's tenant, unless `fields` says otherwise."""
    at = at or utcnow()
    values: dict[str, Any] = {
        "id": uuid7(),
        "thought": None,
        "system": System.LONG_TERM,
        "type": MemoryType.SEMANTIC,
        "segment": Segment.USER,
        "scope": Scope.AGENT,
        "subject_id": None,
        "organization_id": None,
        "chat_room_id": None,
        "metadata": {},
        "status": Status.ACTIVE,
        "inserted_at": at,
        "updated_at": at,
        "tenant_id": agent.tenant,
    }
    values.update(fields)
    return Memory(content=content, source_agent_id=uuid.UUID(agent.id), **values)
