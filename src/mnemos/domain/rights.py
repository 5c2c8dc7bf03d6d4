"""People's rights over what agents remember about them: count it, take it with them (export),
erase it (docs/privacy.md). The one entry point for the human API, the operator's commands and
the web page; what "about a person" means is `visibility.about`.

Neither export nor erasure needs the memory plan: a person keeps their rights when their plan
no longer includes memory.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Protocol

from mnemos.domain.human import HumanMemoryService
from mnemos.domain.ids import utcnow, uuid7
from mnemos.domain.models import (
    AgentContext,
    Change,
    ChangedBy,
    EncodedBatch,
    Erasure,
    Memory,
    Owners,
    UserContext,
)
from mnemos.domain.pagination import MAX_LIMIT
from mnemos.domain.ports import AccountStore, MemoryStore, RightsStore, RoomStore
from mnemos.domain.queries import ALL_STATUSES, MemoryQuery
from mnemos.domain.tenants import Tenants
from mnemos.domain.visibility import about
from mnemos.errors import InvalidPagination, NotFound

EXPORT_BATCH = 1_000
"""Memories read per query while exporting: the export holds one batch at a time."""
ENCODED_BATCH = 5_000
"""The same for an export the database encodes (a few MB of JSON per batch)."""


@dataclass(frozen=True)
class HistoryPage:
    """A page of a memory's history, oldest first, and the cursor of the next (None: last)."""

    changes: list[Change]
    next_cursor: str | None


@dataclass(frozen=True)
class Exported:
    """One memory of an export, with its display names and its history."""

    memory: Memory
    display: dict[str, Any]
    history: list[Change]


class RightsServiceStore(RightsStore, MemoryStore, AccountStore, RoomStore, Protocol):
    """What is about a person, their erasure and history; people, agents, rooms for names."""


class RightsService:
    """Count, export and erase what is about a person."""

    def __init__(self, store: RightsServiceStore, human: HumanMemoryService):
        self.store = store
        self.human = human

    def person(self, user_id: uuid.UUID) -> UserContext:
        """The person an operator names (404 when there is none)."""
        ctx = self.store.user_context(user_id)
        if ctx is None:
            raise NotFound("No such user", {"user": str(user_id)})
        return ctx

    def count(self, ctx: UserContext) -> int:
        """How many memories are about the person, every status."""
        query = MemoryQuery(audiences=(about(ctx.user.id),), statuses=ALL_STATUSES)
        return self.store.count_memories(query)

    def export(self, ctx: UserContext, batch: int = EXPORT_BATCH) -> Iterator[list[Exported]]:
        """Every memory about the person (every status) with display names and history, one
        batch at a time: memory use does not grow with the number of memories. Lazy: nothing is
        read before the first batch is asked for."""
        after: Memory | None = None
        while True:
            items = list(self.store.memories_about(ctx.user.id, after=after, limit=batch))
            if not items:
                return
            shown = self.human.display_fields(ctx, items)
            reach = Tenants(about=ctx.user.id)
            history = self.store.history_of(reach, [m.id for m in items])
            yield [Exported(m, shown[m.id], history[m.id]) for m in items]
            if len(items) < batch:
                return
            after = items[-1]

    def export_encoded(
        self, ctx: UserContext, batch: int = ENCODED_BATCH
    ) -> Iterator[tuple[EncodedBatch, dict[Owners, dict[str, Any]]]]:
        """`export` as the database encodes it (the fast path of NDJSON exports): per batch, the
        memories' and histories' JSON, and the display names per owners of the batch. Lazy."""
        shown: dict[Owners, dict[str, Any]] = {}  # few distinct owners: kept for the export
        # Closed with this generator (an abandoned download): the store may hold a connection.
        with closing(self.store.memories_about_encoded(ctx.user.id, limit=batch)) as batches:
            for found in batches:
                new = set(found.owners.values()).difference(shown)
                if new:
                    shown |= self.human.display_by_owners(ctx, new)
                yield found, shown

    def erase(self, ctx: UserContext, by: ChangedBy) -> Erasure:
        """Erase every memory about the person, every status, and its history, in one
        transaction; an erasure event (who, when, how many; no content) remains. Running it
        again erases 0."""
        erasure = Erasure(id=uuid7(), subject_id=ctx.user.id, by=by, at=utcnow())
        erased = self.store.erase_subject(erasure)
        return Erasure(erasure.id, erasure.subject_id, by, erasure.at, erased)

    def erasures(self, ctx: UserContext) -> list[Erasure]:
        return self.store.erasures_of(ctx.user.id)

    # --- history: visible exactly when the memory is, in pages --------------------------------

    def history_as_agent(
        self, ctx: AgentContext, memory_id: str, limit: int, cursor: str | None
    ) -> HistoryPage:
        """A page of a memory's changes, oldest first; 404 exactly when `get_as_agent` is."""
        memory = self.human.memories.get_as_agent(ctx, memory_id)
        return self._history_page(memory, limit, cursor)

    def history_as_user(
        self, ctx: UserContext, memory_id: str, limit: int, cursor: str | None
    ) -> HistoryPage:
        """A page of a memory's changes, oldest first; 404 and 403 exactly when
        `HumanMemoryService.get` answers them."""
        memory = self.human.get(ctx, memory_id)
        return self._history_page(memory, limit, cursor)

    def _history_page(self, memory: Memory, limit: int, cursor: str | None) -> HistoryPage:
        """`limit` changes after `cursor` (the previous page's `next_cursor`): pages, as lists
        have, because anyone allowed to change a memory (a person of another organization
        archiving and restoring it: review18) can grow its history without bound."""
        if not 1 <= limit <= MAX_LIMIT:
            raise InvalidPagination(
                f"limit must be between 1 and {MAX_LIMIT}",
                details={"limit": f"must be 1..{MAX_LIMIT}"},
            )
        codec = self.human.memories.codec
        after = 0 if cursor is None else codec.decode_history(cursor, memory.id)
        tenants = Tenants((memory.tenant_id,))
        placed = self.store.history_page(tenants, memory.id, after, limit + 1)
        shown = placed[:limit]
        more = len(placed) > limit
        next_cursor = codec.encode_history(memory.id, shown[-1][0]) if more else None
        return HistoryPage([change for _, change in shown], next_cursor)
