"""The storage seam: one small interface, one implementation per backend.

The domain talks only to `Store`. Implementations translate these calls to SQL and back to
domain objects; they decide nothing about who may see what (the `MemoryQuery` they get
already says it).
"""

from __future__ import annotations

import abc
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from mnemos.domain.models import (
    Agent,
    AgentContext,
    Memory,
    Organization,
    Status,
    User,
    UserContext,
)
from mnemos.domain.pagination import Position
from mnemos.domain.queries import MemoryQuery

KeyKind = Literal["agent", "user"]


class Store(abc.ABC):
    """Persistent state of one Mnemos deployment."""

    # --- lifecycle -------------------------------------------------------------------------

    @abc.abstractmethod
    def ping(self) -> None:
        """Raise if the database cannot be reached; used by `GET /healthz`."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release every connection."""

    @abc.abstractmethod
    def secret(self, name: str) -> bytes:
        """A random secret shared by every process on this database, created on first use.

        >>> store.secret("cursor") == store.secret("cursor")
        True
        """

    # --- accounts --------------------------------------------------------------------------

    @abc.abstractmethod
    def create_organization(self, org: Organization) -> None: ...

    @abc.abstractmethod
    def get_organization(self, org_id: uuid.UUID) -> Organization | None: ...

    @abc.abstractmethod
    def create_user(self, user: User) -> None: ...

    @abc.abstractmethod
    def get_user(self, user_id: uuid.UUID) -> User | None: ...

    @abc.abstractmethod
    def set_memory_enabled(
        self, kind: Literal["organization", "user"], entity_id: uuid.UUID, enabled: bool
    ) -> bool:
        """Turn memory access on or off; False when no such entity exists."""

    @abc.abstractmethod
    def create_agent(self, agent: Agent) -> None: ...

    @abc.abstractmethod
    def get_agent(self, agent_id: uuid.UUID) -> Agent | None: ...

    @abc.abstractmethod
    def add_api_key(self, key_hash: str, kind: KeyKind, principal_id: uuid.UUID) -> None:
        """Record the hash of a newly issued key (the key itself is never stored)."""

    @abc.abstractmethod
    def agent_by_key(self, key_hash: str) -> AgentContext | None:
        """The agent whose live agent key hashes to `key_hash`, with owner and organization."""

    @abc.abstractmethod
    def user_by_key(self, key_hash: str) -> UserContext | None:
        """The person whose live user key hashes to `key_hash`, with organization."""

    @abc.abstractmethod
    def user_context(self, user_id: uuid.UUID) -> UserContext | None:
        """A person and their organization, by id (for JWT callers)."""

    # --- memories --------------------------------------------------------------------------

    @abc.abstractmethod
    def insert_memory(self, memory: Memory) -> None: ...

    @abc.abstractmethod
    def get_memory(self, memory_id: uuid.UUID) -> Memory | None: ...

    @abc.abstractmethod
    def set_memory_status(
        self, memory_id: uuid.UUID, status: Status, now: datetime
    ) -> Memory | None:
        """Change a memory's status and `updated_at`; the updated memory, or None if gone."""

    @abc.abstractmethod
    def list_memories(
        self,
        query: MemoryQuery,
        *,
        limit: int,
        after: Position | None = None,
        offset: int = 0,
    ) -> Sequence[Memory]:
        """Up to `limit` memories matching `query`, newest first by `(inserted_at, id)`.

        `after` continues strictly after a row (keyset); `offset` skips rows (offset family).
        """

    @abc.abstractmethod
    def count_memories(self, query: MemoryQuery) -> int: ...
