"""Storing, listing, reading and changing memories; who may see what is `visibility.py`'s.

Routes of every API family call these functions with an authenticated context and parsed
input; they return domain objects or raise `MnemosError`s.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any, Literal, Protocol

from mnemos.domain.history import by_agent
from mnemos.domain.ids import try_uuid, utcnow, uuid7
from mnemos.domain.models import (
    VALID_TYPES,
    AgentContext,
    Memory,
    MemoryType,
    Scope,
    Segment,
    Status,
    System,
)
from mnemos.domain.pagination import (
    CursorCodec,
    CursorPage,
    OffsetPage,
    PageRequest,
    Position,
    cursor_meta,
    offset_meta,
)
from mnemos.domain.ports import MemoryStore, RoomStore, SearchPages, VectorStore
from mnemos.domain.probes import Probe
from mnemos.domain.queries import Filters, MemoryQuery
from mnemos.domain.recall import Recall, Recalled, SearchMode, query_words
from mnemos.domain.rooms import not_in_room
from mnemos.domain.search import SearchQuery
from mnemos.domain.tenants import agent_reach, agent_tenant
from mnemos.domain.values import check_metadata, check_text
from mnemos.domain.visibility import (
    admitted,
    agent_changes,
    agent_list,
    agent_reads,
    require_memory_plan,
)
from mnemos.errors import (
    Conflict,
    Forbidden,
    InvalidMemoryType,
    NotFound,
    OrgScopeRequiresOrganization,
    SubjectIdRequired,
    SubjectIdRequiresSubjectScope,
    invalid_field,
)

IDEMPOTENCY_TTL = timedelta(hours=24)
RANKED_LIST_CAP = 100
IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")


def check_idempotency_key(key: str) -> str:
    if not IDEMPOTENCY_KEY.match(key):
        raise invalid_field("Idempotency-Key", "must be 1-255 visible ASCII characters")
    return key


def draft_fingerprint(draft: MemoryDraft) -> str:
    """A digest of what a store request asks for, to tell a retry from a different request."""
    fields = {
        name: (str(value) if isinstance(value, uuid.UUID | StrEnum) else value)
        for name, value in draft.__dict__.items()
    }
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class MemoryDraft:
    """A store request, already shaped by the API layer."""

    content: str
    thought: str
    system: System
    type: MemoryType
    segment: Segment
    scope: Scope | None = None
    subject_id: uuid.UUID | None = None
    chat_room_id: uuid.UUID | None = None
    metadata: dict[str, Any] | None = None


def _new_memory(draft: MemoryDraft, **decided: Any) -> Memory:
    """A new active memory: every field of the draft as sent, then what the rules `decided`.

    Fields are copied by name, so a field added to the draft and to `Memory` needs nothing here
    (`tests/test_field_mappings.py` checks that every draft field is a memory field).
    """
    now = utcnow()
    fields = {**draft.__dict__, "metadata": draft.metadata or {}, **decided}
    return Memory(id=uuid7(), status=Status.ACTIVE, inserted_at=now, updated_at=now, **fields)


@dataclass(frozen=True)
class MemoryPage:
    items: list[Memory]
    meta: dict[str, Any]
    deprecated: bool


Whose = Literal["me", "org"]
"""Whose memories an agent's list reads: its own, or its organization's (wire: `memory_scope`)."""

ScopeFilter = Literal["agent", "subject", "organization", "all"]
"""Which memory `Scope` an agent's list keeps, or all of them (wire: the agent API's `scope`)."""


@dataclass(frozen=True)
class AgentListParams:
    memory_scope: Whose = "me"
    scope: ScopeFilter | None = None
    subject_id: uuid.UUID | None = None


class MemoryServiceStore(MemoryStore, RoomStore, VectorStore, SearchPages, Protocol):
    """Memories, a member's role in a room (rooms widen who may write), memory vectors and the
    kept answers of searches being paged."""


class MemoryService:
    """The memory rules over one store."""

    def __init__(
        self,
        store: MemoryServiceStore,
        codec: CursorCodec,
        *,
        max_content_chars: int = 10_000,
        recall: Recall | None = None,
        rank_content_query: bool = False,
    ):
        self.store = store
        self.codec = codec
        self.max_content_chars = max_content_chars
        self.recall = recall or Recall(store, None, codec)
        # MNEMOS_CONTENT_QUERY_MODE=hybrid: a list with a content_query ranks by relevance.
        self.rank_content_query = rank_content_query

    # --- shared ----------------------------------------------------------------------------

    def page(
        self, query: MemoryQuery, request: PageRequest, probe: Probe | None = None
    ) -> MemoryPage:
        """Run a query for one page of either pagination family (`probe`: a ranked list's
        query embedded first, `ranked_list_text`)."""
        if self._ranks(query.search, request):
            return self._relevance_page(query, request, probe)
        if isinstance(request, OffsetPage):
            with self.store.snapshot():  # the total counts the same state the page shows
                items = list(
                    self.store.list_memories(query, limit=request.page_size, offset=request.offset)
                )
                total = self.store.count_memories(query)
            return MemoryPage(items, offset_meta(request, total), deprecated=True)
        return self._cursor_page(query, request)

    def _cursor_page(self, query: MemoryQuery, request: CursorPage) -> MemoryPage:
        rows = list(self.store.list_memories(query, limit=request.limit + 1, after=request.after))
        items = rows[: request.limit]
        next_cursor = None
        if len(rows) > request.limit:
            last = items[-1]
            next_cursor = self.codec.encode(Position(last.inserted_at, last.id))
        return MemoryPage(items, cursor_meta(request, next_cursor), deprecated=False)

    def _ranks(self, search: SearchQuery | None, request: PageRequest) -> bool:
        """Whether a list ranks by relevance: a `content_query` under
        MNEMOS_CONTENT_QUERY_MODE=hybrid, except a keyset page after a cursor. A ranked list
        issues no cursor, so a cursor is the `filter` mode's (a client that paged before the
        switch): it continues the newest-first list it came from, to its end."""
        continued = isinstance(request, CursorPage) and request.after is not None
        return self.rank_content_query and search is not None and not continued

    def ranked_list_text(self, filters: Filters, request: PageRequest) -> str | None:
        """The words a list with these filters and page ranks by meaning when its query is to
        be embedded before it runs (`Recall.embedded_first`: an embedder on another machine);
        else None."""
        ranked = self._ranks(filters.search, request)
        if not ranked or not self.recall.embeds_elsewhere(SearchMode.HYBRID, None):
            return None
        assert filters.search is not None
        return query_words(filters.search)

    def _relevance_page(
        self, query: MemoryQuery, request: PageRequest, probe: Probe | None
    ) -> MemoryPage:
        """A `content_query` list ranked by hybrid search (MNEMOS_CONTENT_QUERY_MODE=hybrid): the
        best `RANKED_LIST_CAP` matches at most, best first; a first cursor page is the first
        page of them (no next cursor), an offset page a slice of them."""
        assert query.search is not None
        text = query_words(query.search)
        if isinstance(request, OffsetPage):
            # Every page ranks (and counts) the whole capped answer: a hybrid search costs the
            # same at any depth, and `total_count` must not depend on the page asked for.
            found, _ = self.recall.answer(query, text, SearchMode.HYBRID, RANKED_LIST_CAP, probe)
            found = found[:RANKED_LIST_CAP]
            page = found[request.offset : request.offset + request.page_size]
            items = [r.memory for r in self.recall.read(query, page)]
            return MemoryPage(items, offset_meta(request, len(found)), deprecated=True)
        found, _ = self.recall.answer(query, text, SearchMode.HYBRID, request.limit, probe)
        items = [r.memory for r in self.recall.read(query, found[: request.limit])]
        return MemoryPage(items, cursor_meta(request, None), deprecated=False)

    def validate_draft(self, draft: MemoryDraft) -> None:
        check_text(draft.content, "content")
        check_text(draft.thought, "thought")
        if not draft.content.strip():
            raise invalid_field("content", "must not be empty")
        if len(draft.content) > self.max_content_chars:
            raise invalid_field("content", f"must be at most {self.max_content_chars} characters")
        if len(draft.thought) > self.max_content_chars:
            raise invalid_field("thought", f"must be at most {self.max_content_chars} characters")
        if draft.type not in VALID_TYPES[draft.system]:
            valid = [kind.value for kind in VALID_TYPES[draft.system]]
            raise InvalidMemoryType(
                f"Type '{draft.type.value}' is not valid for system '{draft.system.value}'",
                details={"system": draft.system.value, "valid_types": valid},
            )
        if draft.metadata is not None:
            check_metadata(draft.metadata)

    # --- the agent API ---------------------------------------------------------------------

    def store_as_agent(
        self, ctx: AgentContext, draft: MemoryDraft, idempotency_key: str | None = None
    ) -> Memory:
        """Store a memory with the agent as its source (docs/design.md, "Store").

        With an idempotency key, a retry of the same request within a day returns the memory the
        first one stored instead of storing another; the same key with a different request is 409.
        """
        require_memory_plan(ctx.owner, ctx.organization)
        self.validate_draft(draft)
        scope = draft.scope or (Scope.SUBJECT if draft.subject_id else Scope.AGENT)
        if scope is Scope.SUBJECT and draft.subject_id is None:
            raise SubjectIdRequired("scope 'subject' requires subject_id")
        if scope is not Scope.SUBJECT and draft.subject_id is not None:
            raise SubjectIdRequiresSubjectScope()
        if scope is Scope.ORGANIZATION and ctx.organization is None:
            raise OrgScopeRequiresOrganization()
        if (
            draft.chat_room_id is not None
            and self.store.role_in(draft.chat_room_id, ctx.agent.id) is None
        ):
            raise not_in_room()
        memory = _new_memory(
            draft,
            scope=scope,
            organization_id=None if scope is Scope.AGENT else ctx.organization_id,
            source_agent_id=ctx.agent.id,
            tenant_id=agent_tenant(ctx),
        )
        if idempotency_key is None:
            self.store.insert_memory(memory, by=by_agent(ctx))
            return memory
        key = check_idempotency_key(idempotency_key)
        fingerprint = draft_fingerprint(draft)
        stored_id, stored_print = self.store.insert_memory_once(
            memory, ctx.agent.id, key, fingerprint, IDEMPOTENCY_TTL, by=by_agent(ctx)
        )
        if stored_print != fingerprint:
            raise Conflict(
                "This Idempotency-Key was used for a different request",
                details={"idempotency_key": "reused with a different body"},
            )
        first = (
            memory if stored_id == memory.id else self.store.get_memory(stored_id, agent_reach(ctx))
        )
        if first is None:
            raise Conflict("The memory stored under this Idempotency-Key was deleted")
        return first

    @staticmethod
    def agent_query(ctx: AgentContext, params: AgentListParams, filters: Filters) -> MemoryQuery:
        """What `GET /api/v1/agent/memories` returns (`visibility.agent_list`)."""
        audiences, subject_id = agent_list(
            ctx, params.memory_scope, params.scope, params.subject_id
        )
        return filters.within(audiences, subject_id=subject_id)

    @classmethod
    def checked_query(
        cls, ctx: AgentContext, params: AgentListParams, filters: Filters
    ) -> MemoryQuery:
        """What the agent's list or search of `params` and `filters` reads, after the plan
        check. It reads nothing, so a route calls it before it has a query embedded: a caller
        refused or a bad parameter costs no call to an embeddings endpoint."""
        require_memory_plan(ctx.owner, ctx.organization)
        return cls.agent_query(ctx, params, filters)

    def list_as_agent(
        self,
        ctx: AgentContext,
        params: AgentListParams,
        filters: Filters,
        request: PageRequest,
        probe: Probe | None = None,
    ) -> MemoryPage:
        return self.page(self.checked_query(ctx, params, filters), request, probe)

    def recall_as_agent(
        self,
        ctx: AgentContext,
        params: AgentListParams,
        filters: Filters,
        text: str,
        mode: SearchMode,
        limit: int,
        cursor: str | None = None,
        probe: Probe | None = None,
        *,
        min_score: float | None = None,
    ) -> Recalled:
        """`GET /api/v1/agent/memories/search`: the agent list of `params` and `filters`, the
        best `limit` for `text` by `mode` (docs/search.md), after `cursor` (the previous page's
        `next_cursor` of the same search); `probe`: the query embedded first, if it was;
        `min_score`: the similarity floor of a search by meaning (`recall.check_floor`)."""
        query = self.checked_query(ctx, params, filters)
        caller = f"agent:{ctx.agent.id}"
        return self.recall.search(
            query, text, mode, limit, cursor, caller=caller, probe=probe, min_score=min_score
        )

    @staticmethod
    def agent_can_read(ctx: AgentContext, memory: Memory) -> bool:
        """Its own memories, and the organization and subject memories of its organization."""
        return admitted(agent_reads(ctx), memory)

    def get_as_agent(self, ctx: AgentContext, memory_id: str) -> Memory:
        require_memory_plan(ctx.owner, ctx.organization)
        ident = try_uuid(memory_id)
        memory = self.store.get_memory(ident, agent_reach(ctx)) if ident else None
        if memory is None or not self.agent_can_read(ctx, memory):
            raise NotFound("Memory not found")
        return memory

    def set_status_as_agent(self, ctx: AgentContext, memory_id: str, status: Status) -> Memory:
        """Supersede or archive: only the storing agent may (403 for others who can see it)."""
        memory = self.get_as_agent(ctx, memory_id)
        if not admitted(agent_changes(ctx), memory):
            raise Forbidden("Only the agent that stored a memory can change its status")
        updated = self.store.set_memory_status(
            memory.tenant_id, memory.id, status, utcnow(), by=by_agent(ctx)
        )
        if updated is None:
            raise NotFound("Memory not found")
        return updated
