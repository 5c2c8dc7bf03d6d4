"""The human API's memory calls (docs/design.md, "Human API"): lists with display fields, gets and
changes. What a person may see and change is `visibility.human_audiences` and `human_changes`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from mnemos.domain.history import by_user
from mnemos.domain.ids import try_uuid, utcnow
from mnemos.domain.memories import MemoryPage, MemoryService
from mnemos.domain.models import Memory, Owners, Status, UserContext
from mnemos.domain.pagination import PageRequest
from mnemos.domain.people import actor_of, sees_agent, sees_user
from mnemos.domain.ports import AccountStore, MemoryStore, RoomStore
from mnemos.domain.probes import Probe
from mnemos.domain.queries import Filters, MemoryQuery, Order
from mnemos.domain.recall import Recalled, SearchMode
from mnemos.domain.tenants import person_reach
from mnemos.domain.visibility import (
    MAX_BRANCHES,
    Reach,
    admitted,
    human_audiences,
    human_changes,
    require_memory_plan,
    shows,
)
from mnemos.errors import Forbidden, MemoryNotArchived, NotFound

HumanView = Literal["about_me", "organization", "room", "all"]
"""Which of (a)-(d) a person's list shows (wire: the human API's `scope`); not a memory `Scope`."""


@dataclass(frozen=True)
class HumanListParams:
    scope: HumanView = "all"
    chat_room_id: uuid.UUID | None = None
    source_agent_id: uuid.UUID | None = None


def _within(
    ctx: UserContext, params: HumanListParams, filters: Filters, order: Order, reach: Reach
) -> MemoryQuery:
    return filters.within(
        human_audiences(ctx, params.scope, reach),
        order,
        chat_room_id=params.chat_room_id,
        source_agent_id=params.source_agent_id,
    )


class HumanStore(MemoryStore, RoomStore, AccountStore, Protocol):
    """Memories, and the rooms and agents a person reaches (for lists and display fields)."""


class HumanMemoryService:
    """The human API's rules, over the shared memory service and store."""

    def __init__(self, memories: MemoryService, store: HumanStore):
        self.memories = memories
        self.store = store

    def query(
        self,
        ctx: UserContext,
        params: HumanListParams,
        filters: Filters,
        order: Order = Order.NEWEST,
    ) -> MemoryQuery:
        """What the person's list of `params` and `filters` runs (after the plan check)."""
        self.check(ctx, params, filters)
        return _within(ctx, params, filters, order, self.reach(ctx))

    @staticmethod
    def check(ctx: UserContext, params: HumanListParams, filters: Filters) -> None:
        """Refuses what the person's list or search of `params` and `filters` refuses, reading
        nothing (their rooms and agents only change how the query is written): a route calls it
        before it has a query embedded, so a refused caller costs no call to an embeddings
        endpoint."""
        require_memory_plan(ctx.user, ctx.organization)
        _within(ctx, params, filters, Order.NEWEST, Reach())

    def list_page(
        self,
        ctx: UserContext,
        params: HumanListParams,
        filters: Filters,
        request: PageRequest,
        probe: Probe | None = None,
    ) -> MemoryPage:
        return self.memories.page(self.query(ctx, params, filters), request, probe)

    def may_change(self, ctx: UserContext, items: list[Memory]) -> set[uuid.UUID]:
        """Which of `items` the person may delete, supersede, archive or restore (the rule of
        `changeable`, decided for a whole page with one query)."""
        agents = tuple(agent.id for agent in self.store.agents_of(ctx.user.id))
        changes = human_changes(ctx, agents)
        return {memory.id for memory in items if admitted(changes, memory)}

    def recall(
        self,
        ctx: UserContext,
        params: HumanListParams,
        filters: Filters,
        text: str,
        mode: SearchMode,
        limit: int,
        cursor: str | None = None,
        probe: Probe | None = None,
        *,
        min_score: float | None = None,
    ) -> tuple[Recalled, dict[uuid.UUID, dict[str, Any]]]:
        """`GET /api/v1/me/memories/search`: the list of `params` and `filters`, the best `limit`
        for `text` by `mode` after `cursor` (the previous page's `next_cursor` of the same
        search), with display fields read from the same state of the data; `probe`: the query
        embedded first, if it was; `min_score`: the similarity floor (`recall.check_floor`)."""
        query = self.query(ctx, params, filters)
        recall = self.memories.recall
        with self.store.snapshot():
            caller = f"user:{ctx.user.id}"
            found = recall.search(
                query, text, mode, limit, cursor, caller=caller, probe=probe, min_score=min_score
            )
            return found, self.display_fields(ctx, [r.memory for r in found.items])

    def page_with_display(
        self,
        ctx: UserContext,
        params: HumanListParams,
        filters: Filters,
        request: PageRequest,
        probe: Probe | None = None,
    ) -> tuple[MemoryPage, dict[uuid.UUID, dict[str, Any]]]:
        """A page and its display fields, read from one state of the data (one connection)."""
        with self.store.snapshot():
            page = self.list_page(ctx, params, filters, request, probe)
            return page, self.display_fields(ctx, page.items)

    def reach(self, ctx: UserContext) -> Reach:
        """The person's rooms and agents (two small queries): each list branch walks an index."""
        rooms = self.store.member_room_ids(ctx.user.id, MAX_BRANCHES + 1)
        agents = [agent.id for agent in self.store.agents_of(ctx.user.id)]
        return Reach(tuple(rooms), tuple(agents))

    def visible(self, ctx: UserContext, memory: Memory) -> bool:
        return shows(self.store, human_audiences(ctx, "all"), memory.id)

    def get(self, ctx: UserContext, memory_id: str) -> Memory:
        """A visible memory; 404 when there is none, 403 when it is not the caller's to see."""
        require_memory_plan(ctx.user, ctx.organization)
        ident = try_uuid(memory_id)
        memory = self.store.get_memory(ident, person_reach(ctx)) if ident else None
        if memory is None:
            # Beyond the person's tenants: 403 if it exists at all (docs/design.md, "GET one").
            if ident is not None and self.store.memory_exists(ident):
                raise Forbidden("This memory is not visible to you")
            raise NotFound("Memory not found")
        if not self.visible(ctx, memory):
            raise Forbidden("This memory is not visible to you")
        return memory

    def changeable(self, ctx: UserContext, memory_id: str) -> Memory:
        """(a) a memory about the caller, or (d) an agent-scoped memory of one of their agents."""
        memory = self.get(ctx, memory_id)
        if shows(self.store, human_changes(ctx), memory.id):
            return memory
        raise Forbidden("Only memories about you or made privately by your agents can be changed")

    def delete(self, ctx: UserContext, memory_id: str) -> uuid.UUID:
        """Delete a memory the person may change; its id (`memory_id` may spell it otherwise:
        upper case, braces, `urn:uuid:`)."""
        memory = self.changeable(ctx, memory_id)
        self.store.delete_memory(memory.tenant_id, memory.id, by=by_user(ctx))
        return memory.id

    def set_status(self, ctx: UserContext, memory_id: str, status: Status) -> Memory:
        memory = self.changeable(ctx, memory_id)
        restore = status is Status.ACTIVE
        if restore and memory.status is not Status.ARCHIVED:
            raise MemoryNotArchived(details={"status": memory.status.value})
        only_from = Status.ARCHIVED if restore else None
        updated = self.store.set_memory_status(
            memory.tenant_id, memory.id, status, utcnow(), by=by_user(ctx), only_from=only_from
        )
        if updated is None:
            raise NotFound("Memory not found")
        if restore and updated.status is not Status.ACTIVE:  # superseded since it was read
            raise MemoryNotArchived(details={"status": updated.status.value})
        return updated

    def display_fields(
        self, ctx: UserContext, items: list[Memory]
    ) -> dict[uuid.UUID, dict[str, Any]]:
        """Names for a page's subjects, agents and rooms: three queries whatever the page size."""
        shown = self.display_by_owners(
            ctx, {(m.subject_id, m.source_agent_id, m.chat_room_id) for m in items}
        )
        return {m.id: shown[(m.subject_id, m.source_agent_id, m.chat_room_id)] for m in items}

    def display_by_owners(
        self, ctx: UserContext, owners: set[Owners]
    ) -> dict[Owners, dict[str, Any]]:
        """`display_fields` per distinct (subject, source agent, room) of the memories."""
        actor = actor_of(ctx)
        subject_ids = {subject for subject, _, _ in owners if subject}
        agent_ids = {agent for _, agent, _ in owners if agent} | subject_ids
        room_ids = list({room for _, _, room in owners if room})
        people = {u.id: u.name for u in self.store.users_by_ids(subject_ids) if sees_user(actor, u)}
        bots = {
            a.id: a.name
            for a, org in self.store.agents_by_ids(agent_ids)
            if sees_agent(actor, a, org)
        }
        member_of = self.store.member_rooms(ctx.user.id, room_ids)
        rooms = {r.id: r for r in self.store.rooms_by_ids(list(member_of))}
        fields: dict[Owners, dict[str, Any]] = {}
        for subject, agent, room_id in owners:
            room = rooms.get(room_id) if room_id else None
            subject_type = None
            if subject in people:
                subject_type = "user"
            elif subject in bots:
                subject_type = "agent"
            fields[(subject, agent, room_id)] = {
                "subject_name": people.get(subject) or bots.get(subject) if subject else None,
                "subject_type": subject_type,
                "source_agent_name": bots.get(agent) if agent else None,
                "chat_room_title": room.title if room else None,
                "chat_room_status": room.status.value if room else None,
                "chat_room_type": room.type.value if room else None,
            }
        return fields
