"""The storage seam: every backend implements `Store`, the union of the domain's ports.

The ports (`mnemos.domain.ports`) are what the domain asks for, one per kind of state;
`Store` adds what only the process around the domain needs (a health check, closing).
Storage imports the domain, never the other way round.
"""

from __future__ import annotations

import abc
import uuid

from mnemos.domain.ports import (
    AccountStore,
    AgentMemoryPosition,
    EndedSessions,
    KeyKind,
    MemoryStore,
    RightsStore,
    RoomStore,
    SearchPages,
    Secrets,
    TuyaStore,
    VectorStore,
)
from mnemos.storage.replicas import ReplicaStatus

__all__ = [
    "AccountStore",
    "AgentMemoryPosition",
    "EndedSessions",
    "KeyKind",
    "MemoryStore",
    "RightsStore",
    "RoomStore",
    "SearchPages",
    "Secrets",
    "Store",
    "TuyaStore",
    "VectorStore",
]


class Store(
    Secrets,
    EndedSessions,
    SearchPages,
    MemoryStore,
    AccountStore,
    RoomStore,
    TuyaStore,
    VectorStore,
    RightsStore,
):
    """Persistent state of one Mnemos deployment: every port, plus its lifecycle."""

    @abc.abstractmethod
    def ping(self) -> None:
        """Raise if the database cannot be reached; used by `GET /healthz`."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release every connection."""

    @abc.abstractmethod
    def act_for(self, organization_id: uuid.UUID | None, person_id: uuid.UUID) -> None:
        """The current request acts for a tenant: the organization, or, without one, the person
        (and that person's agents). Its reads see every write made for that tenant, in any
        process; its writes are made for it. Called by authentication; a request that never
        calls it reads the primary."""

    @abc.abstractmethod
    def replica_status(self) -> list[ReplicaStatus]:
        """What the last check of each read replica found (empty without replicas)."""
