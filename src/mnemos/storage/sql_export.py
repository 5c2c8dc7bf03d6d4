"""An export encoded by the database: each memory about a person and its history as JSON text,
written by SQL (SQLite's `json_object`; on PostgreSQL concatenated text, the bytes its
`json_build_object` writes at a third of the work) and handed over as UTF-8 bytes, so that
exporting 100,000 memories builds no Python object per field and few per memory.

The wire form is the one `mnemos.api.schemas.memory_json` and `mnemos.api.rights.change_json`
write (ids as dashed UUIDs, times as UTC ISO 8601 with microseconds and a `Z`, enums as their
values, metadata as an object); `tests/api/test_rights.py` checks that both agree, row for row.
The fields come from `Memory` (the columns of the same names) and their kinds from its types.
"""

from __future__ import annotations

import dataclasses
import json
import typing
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mnemos.domain.models import EncodedBatch, Memory, Owners
from mnemos.storage.rows import UNREADABLE_JSON
from mnemos.storage.sql_conditions import read_tenants_of

Format = Callable[[str], str]

_MARKER = json.dumps(UNREADABLE_JSON).replace("'", "''")


def _sqlite_uuid(column: str) -> str:
    # SQLite keeps a UUID as its 32 hex digits (NULL stays NULL through `||`).
    parts = ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))
    return "||'-'||".join(f"substr({column}, {start}, {length})" for start, length in parts)


def _sqlite_time(column: str) -> str:
    # SQLite keeps "2026-11-30 06:06:30.123456" (microseconds always written).
    return f"replace({column}, ' ', 'T')||'Z'"


def _sqlite_json(column: str) -> str:
    return (
        f"CASE WHEN {column} IS NULL THEN json('{{}}') WHEN json_valid({column}) "
        f"THEN json({column}) ELSE json('{_MARKER}') END"
    )


def _pg_time(column: str) -> str:
    time = f"""to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"""
    return _pg_nullable(f"""'"' || {time} || '"'""")


def _pg_json(column: str) -> str:
    # The stored text as it is, as the API answers it (jsonb would turn 1e20 into a 21-digit
    # integer, drop -0.0's sign and reorder keys).
    return f"coalesce({column}::text, '{{}}')"


def _pg_word(column: str) -> str:
    # A UUID's text, or an enum's value (a closed vocabulary of plain words, as `to_memory`
    # and `Change` read them back): nothing to escape.
    return _pg_nullable(f"""'"' || {column}::text || '"'""")


def _pg_text(column: str) -> str:
    return _pg_nullable(f"to_json({column})::text")  # escaped as json_build_object escapes


def _pg_nullable(value: str) -> str:
    return f"coalesce({value}, 'null')"


def _pg_object(fields: list[tuple[str, str]]) -> str:
    # The text json_build_object writes ('{"a" : 1, "b" : 2}'), concatenated: PostgreSQL 15's
    # json_build_object looks up how to write each argument, keys included, on every row
    # (BENCHMARKS.md, export13).
    parts = [
        f"'{', ' if i else '{'}\"{name}\" : ' || {sql}" for i, (name, sql) in enumerate(fields)
    ]
    return "(" + " || ".join(parts) + " || '}')"


def _sqlite_object(fields: list[tuple[str, str]]) -> str:
    return "json_object(" + ", ".join(f"'{name}', {sql}" for name, sql in fields) + ")"


def _as_is(column: str) -> str:
    return column


Kind = type | None
"""A field's wire kind: UUID, datetime, dict, StrEnum (a word), or None (a string)."""

# Per dialect: how an object is written from its fields' values, and how a column of each kind
# is written as a value (SQLite: a JSON value; PostgreSQL: JSON text).
DIALECTS: dict[str, tuple[Callable[[list[tuple[str, str]]], str], dict[Kind, Format]]] = {
    "sqlite": (
        _sqlite_object,
        {uuid.UUID: _sqlite_uuid, datetime: _sqlite_time, dict: _sqlite_json},
    ),
    "postgresql": (
        _pg_object,
        {
            uuid.UUID: _pg_word,
            datetime: _pg_time,
            dict: _pg_json,
            StrEnum: _pg_word,
            None: _pg_text,
        },
    ),
}


def _kind(hint: Any) -> Kind:
    """The wire kind of a field type."""
    for kind in (uuid.UUID, datetime, dict):
        if hint is kind or kind in typing.get_args(hint) or typing.get_origin(hint) is kind:
            return kind
    if isinstance(hint, type) and issubclass(hint, StrEnum):
        return StrEnum
    return None


# The public fields: a memory's tenant is storage's (as in `MemoryOut`).
_MEMORY_KINDS = {
    field.name: _kind(hint)
    for field, hint in zip(
        dataclasses.fields(Memory), typing.get_type_hints(Memory).values(), strict=True
    )
    if field.name != "tenant_id"
}


def _object(dialect: str, fields: list[tuple[str, str]]) -> str:
    return DIALECTS[dialect][0](fields)


def _field(dialect: str, kind: Kind, column: str) -> str:
    return DIALECTS[dialect][1].get(kind, _as_is)(column)


def memory_object(dialect: str, table: str, *extra: tuple[str, str]) -> str:
    """The SQL of a memory's JSON object, fields in `Memory`'s order, then `extra` fields (each
    a value as `_field` writes one)."""
    columns = [
        (name, _field(dialect, kind, f'{table}."{name}"')) for name, kind in _MEMORY_KINDS.items()
    ]
    return _object(dialect, [*columns, *extra])


def history_array(dialect: str, table: str) -> str:
    """The SQL of the JSON array of a memory's changes, oldest first (`change_json`'s form), as
    a field's value (one index range scan of `ix_memory_history_memory`)."""
    actor = [
        ("type", _field(dialect, StrEnum, "h.actor_type")),
        ("id", _field(dialect, None, "h.actor_id")),
    ]
    change = _object(
        dialect,
        [
            ("event", _field(dialect, StrEnum, "h.event")),
            ("actor", _object(dialect, actor)),
            ("request_id", _field(dialect, None, "h.request_id")),
            ("superseded_by", _field(dialect, uuid.UUID, "h.superseded_by")),
            ("at", _field(dialect, datetime, "h.at")),
        ],
    )
    changes = (
        f"FROM memory_history h WHERE h.tenant_id = {table}.tenant_id "
        f"AND h.memory_id = {table}.id ORDER BY h.pk"
    )
    if dialect == "postgresql":
        # ARRAY(...) keeps its subquery's order, the index's: no sort per memory (an ordered
        # aggregate sorts each memory's changes).
        return f"'[' || array_to_string(ARRAY(SELECT {change} {changes}), ', ') || ']'"
    # A JSON value loses its JSON type through a subquery's column: json() gives it back.
    return f"json((SELECT json_group_array(json(c)) FROM (SELECT {change} AS c {changes})))"


def _utf8(dialect: str, text: str) -> str:
    # PostgreSQL's text is its UTF-8 bytes on the wire (read raw by `pg_export`); SQLite gives
    # a BLOB as bytes: either way no `str` is decoded per memory only to be encoded again.
    return text if dialect == "postgresql" else f"CAST({text} AS BLOB)"


def line_object(dialect: str, table: str) -> str:
    """The SQL of one export line as UTF-8: the memory's JSON object with its `"history"` last."""
    line = memory_object(dialect, table, ("history", history_array(dialect, table)))
    return _utf8(dialect, line)


def owners_key(dialect: str, table: str) -> str:
    """The SQL of a text naming a memory's source agent and room (its subject is the export's)."""
    as_text = "::text" if dialect == "postgresql" else ""
    return _utf8(
        dialect,
        f"coalesce({table}.source_agent_id{as_text}, '') || ' ' || "
        f"coalesce({table}.chat_room_id{as_text}, '')",
    )


_ORDER = "m.scope, m.inserted_at, m.id"


def about_statement(dialect: str, *, first: bool) -> sa.TextClause:
    """One batch of the memories about `:subject`, on the subject index's order (keyset): the
    order's columns, the owners' key and the line.

    The subject's tenants are bound as values (`:tenants`, `read_tenants_of`)."""
    after = "" if first else f"AND ({_ORDER}) > (:after_scope, :after_at, :after_id) "
    return sa.text(
        f"SELECT {_ORDER}, {owners_key(dialect, 'm')}, {line_object(dialect, 'm')} "
        "FROM memories m WHERE m.tenant_id IN :tenants "
        f"AND m.subject_id = :subject {after}"
        f"ORDER BY {_ORDER} LIMIT :limit"
    ).bindparams(
        sa.bindparam("subject", type_=sa.Uuid()),
        sa.bindparam("tenants", type_=sa.Uuid(), expanding=True),
    )


_STATEMENTS: dict[str, dict[bool, sa.TextClause]] = {}


def encoded_statements(dialect: str) -> dict[bool, sa.TextClause]:
    """`about_statement` in `dialect`, for the first batch (True) and the next ones, built once."""
    found = _STATEMENTS.get(dialect)
    if found is None:
        found = _STATEMENTS[dialect] = {
            first: about_statement(dialect, first=first) for first in (True, False)
        }
    return found


Key = tuple[Any, Any, Any]
"""A memory's place in the export's order (scope, inserted_at, id): the next batch's start."""


def about_params(
    subject: uuid.UUID, tenants: list[Any], after: Key | None, limit: int
) -> dict[str, Any]:
    """The parameters of `about_statement` (`first=after is None`)."""
    params: dict[str, Any] = {"subject": subject, "limit": limit, "tenants": tenants}
    if after is not None:
        params |= dict(zip(("after_scope", "after_at", "after_id"), after, strict=True))
    return params


def read_batch(
    conn: Connection,
    statements: dict[bool, sa.TextClause],
    subject: uuid.UUID,
    after: Key | None,
    limit: int,
) -> tuple[EncodedBatch, Key | None]:
    """Read one encoded batch after `after` (None: the first), and its last memory's key."""
    tenants = read_tenants_of(conn, subject)
    if not tenants:
        return EncodedBatch([], [], {}), None
    rows = conn.execute(statements[after is None], about_params(subject, tenants, after, limit))
    return encoded_batch(subject, rows.all())


def encoded_batch(subject: uuid.UUID, rows: Sequence[Any]) -> tuple[EncodedBatch, Key | None]:
    """The batch of `about_statement`'s rows, and its last memory's key. Per row, only its line
    and its owners' key are kept: no value is parsed or built per memory."""
    last = (rows[-1][0], rows[-1][1], rows[-1][2]) if rows else None
    lines, keys = [_bytes(row[4]) for row in rows], [_bytes(row[3]) for row in rows]
    return batch_of(subject, lines, keys), last


def batch_of(subject: uuid.UUID, lines: list[bytes], keys: list[bytes]) -> EncodedBatch:
    """The batch of these lines and owners' keys (`about_statement`'s last two columns)."""
    return EncodedBatch(lines, keys, {key: _owners(subject, key) for key in set(keys)})


def _bytes(value: bytes | str) -> bytes:
    # SQLAlchemy's psycopg gives PostgreSQL's text as `str` (the batch-by-batch path).
    return value.encode() if isinstance(value, str) else value


def _owners(subject: uuid.UUID, key: bytes) -> Owners:
    agent, _, room = key.decode().partition(" ")
    return subject, uuid.UUID(agent) if agent else None, uuid.UUID(room) if room else None
