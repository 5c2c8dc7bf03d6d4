"""Whose shard a memory-side row is on (its tenant), and which tenants a request reaches.

Every memory-side row (`storage/schema.py`, `MEMORY_SIDE`) carries a `tenant_id` and every
query of it filters by one (docs/decisions.md, "Tenants: a shard-ready schema"):

- A memory's tenant is the organization of the agent that stores it (its owner's), whatever
  the memory's scope: a member's agent-scoped memories live with the organization's. For an
  agent whose owner has no organization, it is that owner (a person is their own tenant).
  Tuya memories are the project's organization's. History rows and idempotency keys are their
  memory's tenant's; an erasure is the erased person's.
- A tenant never changes for a row: a person who joins or leaves an organization later leaves
  their agents' earlier memories where they were (moving them is a data migration).
- Requests act within their caller's tenant, except a person's reads of what is about them
  (memories other organizations' agents stored about them), which reach every tenant that
  holds such memories (`Tenants.about`: a multi-shard query in Citus terms).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from mnemos.domain.models import AgentContext, UserContext

UNKNOWN = uuid.UUID(int=0)
"""The tenant of rows that named none when tenants were added (migration 0018)."""


def tenant_of(organization_id: uuid.UUID | None, person_id: uuid.UUID) -> uuid.UUID:
    """An organization, or the person without one."""
    return organization_id or person_id


def agent_tenant(ctx: AgentContext) -> uuid.UUID:
    """Where an agent's memories go: its owner's organization, or its owner."""
    return tenant_of(ctx.organization_id, ctx.owner.id)


def person_tenant(ctx: UserContext) -> uuid.UUID:
    """A person's own tenant: their organization, or themselves."""
    return tenant_of(ctx.organization_id, ctx.user.id)


@dataclass(frozen=True)
class Tenants:
    """The tenants one read or change may touch: `ids`, and with `about`, every tenant that
    holds memories about that person (looked up in `subject_tenants`). Never empty."""

    ids: tuple[uuid.UUID, ...] = ()
    about: uuid.UUID | None = None

    def __post_init__(self) -> None:
        if not self.ids and self.about is None:
            raise ValueError("a request reaches at least one tenant")


def agent_reach(ctx: AgentContext) -> Tenants:
    """An agent reads and changes within its own tenant only."""
    return Tenants((agent_tenant(ctx),))


def person_reach(ctx: UserContext) -> Tenants:
    """A person: their own tenant, and every tenant holding memories about them."""
    return Tenants((person_tenant(ctx),), about=ctx.user.id)
