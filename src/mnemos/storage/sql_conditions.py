"""Lists as SQL conditions: what each audience field and each filter of a `MemoryQuery` means.

Both tables are keyed by the field names of `mnemos.domain.queries` (`Audience`, `Filters`); a
value is bound under its field's name, never rendered into the SQL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mnemos.domain.models import Status
from mnemos.domain.queries import FILTER_NAMES, Audience, MemoryQuery
from mnemos.domain.tenants import Tenants
from mnemos.storage.schema import agents, chat_participants, memories, subject_tenants

M = memories.c

OWNERS = ("source_agent_id", "subject_id", "chat_room_id", "organization_id")
"""A memory's owner columns (the same names on `Audience`), narrowest first: the order in which
SQLite's scope tokens (`sqlite.SCOPE_TOKENS`) and the vector layout's owner keys
(`sql_vectors.OWNER_COLUMNS`) name them, and in which `narrowest_owner` looks."""


def narrowest_owner(audience: Audience) -> str | None:
    """The narrowest owner column an audience pins (`OWNERS`), if any: the owner whose index
    or token a search of this audience walks."""
    for column in OWNERS:
        if getattr(audience, column) is not None:
            return column
    return None


def tenants_of(subject: Any) -> sa.Select[Any]:
    """The tenants holding memories about `subject` (a value or a bound parameter)."""
    return sa.select(subject_tenants.c.tenant_id).where(subject_tenants.c.subject_id == subject)


def read_tenants_of(conn: Connection, subject: Any) -> list[Any]:
    """The tenants holding memories about `subject`, read first to be bound as values
    (`tenant_id IN :tenants`) in a statement that walks everything about a person (its export).

    With the tenants as values PostgreSQL's statistics over (tenant, subject) count the pair's
    rows and it walks the subject index in order. Joined from `subject_tenants` inside the
    statement, the tenant was unknown when planning: it expected a tenth of the rows, and read
    every memory about the person and sorted them for each batch."""
    return list(conn.execute(tenants_of(subject)).scalars())


def in_tenants(table: sa.Table, tenants: Tenants) -> sa.ColumnElement[bool]:
    """`table`'s rows of `tenants`: named ones, and those holding memories about a subject."""
    column = table.c.tenant_id
    named = [column.in_(tenants.ids)] if tenants.ids else []
    about = [column.in_(tenants_of(tenants.about))] if tenants.about is not None else []
    return sa.or_(*named, *about)


def _values_of(members: Any) -> list[str]:
    return [member.value for member in members]


@dataclass(frozen=True)
class FieldSql:
    """How one field of an `Audience` or of `Filters` narrows a list: its condition on a bound
    parameter, what to bind for a value, and which values leave it unset (beyond None)."""

    condition: Callable[[Any], sa.ColumnElement[bool]]
    bind: Callable[[Any], Any] = lambda value: value.value if isinstance(value, Enum) else value
    unset: Callable[[Any], bool] = lambda _value: False
    expanding: bool = False


def _set_fields(
    source: object, table: dict[str, FieldSql | None], names: tuple[str, ...]
) -> list[tuple[str, Any]]:
    """`(name, bound value)` of each field of `source` that has SQL and is set, in `names` order."""
    values = []
    for name in names:
        entry = table[name]
        value = getattr(source, name)
        if entry is not None and value is not None and not entry.unset(value):
            values.append((name, entry.bind(value)))
    return values


# One entry per field of `Audience` (a test checks it), in the order of its fields.
# `without_subject` is None here: it is part of the statement's shape (`subject_id IS NULL`).
AUDIENCE_SQL: dict[str, FieldSql | None] = {
    "scopes": FieldSql(M.scope.in_, _values_of, expanding=True),
    "source_agent_id": FieldSql(lambda p: M.source_agent_id == p),
    "organization_id": FieldSql(lambda p: M.organization_id == p),
    "subject_id": FieldSql(lambda p: M.subject_id == p),
    "room_member_user_id": FieldSql(
        lambda p: M.chat_room_id.in_(
            sa.select(chat_participants.c.chat_room_id).where(
                chat_participants.c.participant_id == p
            )
        )
    ),
    "source_agent_owner_id": FieldSql(
        lambda p: M.source_agent_id.in_(sa.select(agents.c.id).where(agents.c.owner_id == p))
    ),
    "chat_room_id": FieldSql(lambda p: M.chat_room_id == p),
    "without_subject": None,
    # An audience without a tenant pins a subject: `SqlStore._branch_conditions` then reaches the
    # subject's tenants (`in_tenants`).
    "tenant_id": FieldSql(lambda p: M.tenant_id == p),
}
AUDIENCE_FIELDS = tuple(field.name for field in fields(Audience))


def audience_values(audience: Audience) -> list[tuple[str, Any]]:
    """The fields an audience pins, in the order of its fields, as bound values."""
    return _set_fields(audience, AUDIENCE_SQL, AUDIENCE_FIELDS)


# One entry per field of `Filters` (a test checks it), in the order of its fields. `search` is
# None here: the backend's full-text hook matches it, per audience.
FILTER_SQL: dict[str, FieldSql | None] = {
    "statuses": FieldSql(
        M.status.in_, _values_of, unset=lambda value: len(value) >= len(Status), expanding=True
    ),
    "system": FieldSql(lambda p: M.system == p),
    "type": FieldSql(lambda p: M.type == p),
    "segment": FieldSql(lambda p: M.segment == p),
    "subject_id": FieldSql(lambda p: M.subject_id == p),
    "source_agent_id": FieldSql(lambda p: M.source_agent_id == p),
    "chat_room_id": FieldSql(lambda p: M.chat_room_id == p),
    "memory_id": FieldSql(lambda p: M.id == p),
    "memory_ids": FieldSql(M.id.in_, list, expanding=True),
    "search": None,
}


def filter_values(query: MemoryQuery) -> list[tuple[str, Any]]:
    """The narrowing filters a query sets, in the order of `Filters`' fields, as bound values."""
    return _set_fields(query, FILTER_SQL, FILTER_NAMES)
