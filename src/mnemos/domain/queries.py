"""What a list asks the store for, as data: who may see what (audiences) and the filters.

The domain builds these from its visibility rules; storage only translates them to SQL. An
`Audience` is one branch of an OR: a memory is visible when it matches every field the
audience sets. An audience must pin at least one owner field, so a missing organization can
never turn into "every organization"; and its tenant (`domain/tenants.py`), or else a subject,
whose tenants it then reaches (the tenants holding memories about them).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from mnemos.domain.models import MemoryType, Scope, Segment, Status, System, parse_enum
from mnemos.domain.search import SearchQuery


@dataclass(frozen=True)
class Audience:
    scopes: tuple[Scope, ...] | None = None
    source_agent_id: uuid.UUID | None = None
    organization_id: uuid.UUID | None = None
    subject_id: uuid.UUID | None = None
    room_member_user_id: uuid.UUID | None = None
    source_agent_owner_id: uuid.UUID | None = None
    chat_room_id: uuid.UUID | None = None
    without_subject: bool = False
    tenant_id: uuid.UUID | None = None

    def __post_init__(self) -> None:
        pinned = (
            self.source_agent_id,
            self.organization_id,
            self.subject_id,
            self.room_member_user_id,
            self.source_agent_owner_id,
            self.chat_room_id,
        )
        if all(value is None for value in pinned):
            raise ValueError("an audience must pin an agent, organization, subject or room member")
        if self.tenant_id is None and self.subject_id is None:
            raise ValueError("an audience must pin its tenant, or a subject (and its tenants)")


@dataclass(frozen=True)
class Filters:
    """The narrowing filters of a memory list, already parsed: each field that is set (not None;
    for `statuses`, not every status) must also hold. Storage turns each field into one SQL
    condition (`storage/sql.py`, `FILTER_SQL`, keyed by these names), so a new filter is a new
    field here, its entry there and its parameter in `api/params.py`."""

    statuses: tuple[Status, ...] = (Status.ACTIVE,)
    system: System | None = None
    type: MemoryType | None = None
    segment: Segment | None = None
    subject_id: uuid.UUID | None = None
    source_agent_id: uuid.UUID | None = None
    chat_room_id: uuid.UUID | None = None
    memory_id: uuid.UUID | None = None
    memory_ids: tuple[uuid.UUID, ...] | None = None  # one of these (a search's later pages)
    search: SearchQuery | None = None  # matched by the backend's full-text hook, not FILTER_SQL

    def within(
        self, audiences: tuple[Audience, ...], order: Order | None = None, **replaced: Any
    ) -> MemoryQuery:
        """These filters, with `replaced` fields changed, over what `audiences` may see."""
        values = {name: getattr(self, name) for name in FILTER_NAMES}
        values.update(replaced)
        return MemoryQuery(audiences=audiences, order=order or Order.NEWEST, **values)


class Order(StrEnum):
    """How a list is ordered: newest first by `(inserted_at, id)` (every API list), or by
    relevance to its search, best first by `(score, id)` (needs a `search`)."""

    NEWEST = "newest"
    RELEVANCE = "relevance"


@dataclass(frozen=True, kw_only=True)
class MemoryQuery(Filters):
    """A list as the store runs it: the filters, over the union of the audiences."""

    audiences: tuple[Audience, ...]
    order: Order = Order.NEWEST

    def __post_init__(self) -> None:
        if self.order is Order.RELEVANCE and self.search is None:
            raise ValueError("a relevance order needs a search")


ALL_STATUSES = tuple(Status)
FILTER_NAMES = tuple(field.name for field in fields(Filters))


def status_filter(value: str | None) -> tuple[Status, ...]:
    """`status` as lists take it: active by default, or one status, or `all`."""
    if value is None:
        return (Status.ACTIVE,)
    if value == "all":
        return tuple(Status)
    return (parse_enum(Status, value, "status", also=("all",)),)
