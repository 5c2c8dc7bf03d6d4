"""`mnemos import` into an empty database: each value as the file holds it, checked and turned
into the driver's value (`transfer_bulk.py` loads the rows; `--merge` checks with `tuples` too).

A batch is converted a column at a time: the columns whose type needs it (UUIDs, times, JSON,
enums' text), the others only checked to hold their type's JSON values, so both backends refuse
the same values; the rest (NOT NULL, keys, lengths) is the database's to refuse.
"""

from __future__ import annotations

import re
import typing
import uuid
from collections import deque
from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from operator import itemgetter
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from mnemos.domain.models import ActorType, HistoryEvent, Memory
from mnemos.storage.schema import UTCDateTime
from mnemos.storage.transfer import TransferError, decoder, python_type

Step = Callable[[Any], Any]
ColumnStep = Callable[[tuple[Any, ...]], tuple[Any, ...] | None]
TEXT_OR_NULL = frozenset({str, type(None)})

ANY: frozenset[type] = frozenset({str, int, float, bool, list, dict, type(None)})
ACCEPTED: dict[type | None, frozenset[type]] = {
    str: frozenset({str, type(None)}),
    int: frozenset({int, type(None)}),
    float: frozenset({float, int, type(None)}),
}
"""The JSON value types a column of each Python type takes as it is (`transfer.python_type`);
null is left to the database's NOT NULL."""


def _values(kind: type[StrEnum]) -> frozenset[str]:
    return frozenset(member.value for member in kind)


MEMBERS: dict[tuple[str, str], frozenset[str]] = {
    **{
        ("memories", name): _values(kind)
        for name, kind in typing.get_type_hints(Memory).items()
        if isinstance(kind, type) and issubclass(kind, StrEnum)
    },
    ("memory_history", "event"): _values(HistoryEvent),
    ("memory_history", "actor_type"): _values(ActorType),
}
"""Text columns that hold one of an enum's values: any other value would make every read of
the row fail (a list holding such a memory answers 500), so an import refuses it."""

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
UTC = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00"
UUID_TEXT, UTC_TEXT = re.compile(UUID).fullmatch, re.compile(UTC).fullmatch
"""A UUID and a time as the exporter writes them (`str(uuid)`, `datetime.isoformat()` in UTC);
any other spelling takes the general path (and a wrong one is refused there)."""


class Spelling:
    """The same spelling as `UUID_TEXT` or `UTC_TEXT` (`template`: each `x` a character of
    `digits`, any other character itself), checked for a whole batch's column at once: the
    values joined by commas, each fixed character checked by one slice of the joined text
    (every value's character at that place), and the digits by counting what `bytes.translate`
    leaves of the text once they are deleted. Ten times faster than the regular expression run
    over the same text, which was about a tenth of an import's time."""

    def __init__(self, template: str, digits: bytes) -> None:
        self.width = len(template)
        self.fixed = [(at, char) for at, char in enumerate(template) if char != "x"]
        self.digits = digits
        self.others = sum(1 for _, char in self.fixed if char.encode() not in digits)

    def joined(self, values: list[str]) -> str | None:
        """The values joined by commas, if every one is spelled so; else None."""
        count, step = len(values), self.width + 1
        joined = ",".join(values)
        if len(joined) != count * step - 1 or joined[self.width :: step] != "," * (count - 1):
            return None
        if any(joined[at::step] != char * count for at, char in self.fixed):
            return None
        # Every other character a digit (a character beyond ASCII encodes to bytes that stay).
        left = joined.encode().translate(None, self.digits)
        return joined if len(left) == count * (self.others + 1) - 1 else None


UUID_SPELLING = Spelling("xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", b"0123456789abcdef")
UTC_SPELLING = Spelling("xxxx-xx-xxTxx:xx:xx.xxxxxx+00:00", b"0123456789")


def converter(column: sa.Column[Any], dialect: Dialect) -> Step | None:
    """How a value of `column` as the file holds it becomes the driver's value (None: as it is).

    UUIDs and times in the exporter's spelling take a shortcut; every other value goes through
    the column's decoder and then SQLAlchemy's own bind processor for `dialect`, as a row-by-row
    insert would. Raises ValueError or TypeError on a value that is not of the column's type."""
    members = MEMBERS.get((column.table.name, column.name))
    if members is not None:
        return _member_step(members)
    general = _compose(decoder(column), column.type.dialect_impl(dialect).bind_processor(dialect))
    if isinstance(column.type, sa.Uuid):
        return _uuid_step(dialect.name, general)
    if isinstance(column.type, UTCDateTime):
        return _time_step(dialect.name, general)
    if isinstance(column.type, sa.JSON):
        return _json_step(column.type)
    return general


def _member_step(members: frozenset[str]) -> Step:
    """An enum's value as it is (null is left to the database's NOT NULL); anything else is
    refused."""

    def member(value: Any) -> Any:
        if value is not None and (type(value) is not str or value not in members):
            raise ValueError(value)
        return value

    return member


def _json_step(kind: sa.JSON) -> Step:
    """JSON text by orjson, several times faster than the `json.dumps` SQLAlchemy calls (the
    text is compact, the value the same; orjson read it, so it can write it). Every JSON column
    of the schema holds an object (a memory's `metadata`): anything else is refused."""
    dumps = orjson.dumps

    def text(value: Any) -> Any:
        if value is None and kind.none_as_null:
            return None
        if not isinstance(value, dict):
            raise TypeError("not a JSON object")
        if _holds_nul(value):  # PostgreSQL's jsonb refuses it, as the API does
            raise ValueError("NUL in a JSON value")
        return dumps(value).decode()

    return text


def _holds_nul(value: Any) -> bool:
    """Whether a JSON value holds NUL in a string or a key, at any depth (iteratively: a file
    may nest as deep as its parser allows)."""
    waiting = [value]
    while waiting:
        item = waiting.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            waiting.extend(item.keys())
            waiting.extend(item.values())
        elif isinstance(item, list):
            waiting.extend(item)
    return False


def _uuid_step(backend: str, general: Step | None) -> Step:
    slow = general or (lambda value: str(uuid.UUID(value)))
    if backend == "postgresql":  # the server reads the text, and refuses what is not a UUID

        def text(value: Any) -> Any:
            return value if value is None or UUID_TEXT(value) else slow(value)

        return text

    def hex_digits(value: Any) -> Any:  # SQLite keeps the 32 hex digits
        if value is None or not UUID_TEXT(value):
            return None if value is None else slow(value)
        return value.replace("-", "")

    return hex_digits


def _time_step(backend: str, general: Step | None) -> Step:
    slow = general or datetime.fromisoformat
    parse = datetime.fromisoformat
    if backend == "postgresql":

        def text(value: Any) -> Any:
            if value is None or not UTC_TEXT(value):
                return None if value is None else slow(value)
            parse(value)  # as on SQLite: the server's own check refuses other days than Python's
            return value

        return text

    def sqlite_text(value: Any) -> Any:  # "2026-12-01 05:26:44.326638", as SQLAlchemy writes
        if value is None or not UTC_TEXT(value):
            return None if value is None else slow(value)
        parse(value)  # refuses a day or an hour that does not exist
        return value[:10] + " " + value[11:26]

    return sqlite_text


def _compose(first: Step | None, then: Step | None) -> Step | None:
    if first is None or then is None:
        return first or then
    return lambda value: None if value is None else then(first(value))


def column_shortcut(column: sa.Column[Any], backend: str) -> ColumnStep | None:
    """For a UUID or time column, the conversion of a whole batch's column at once, in C: the
    values joined, checked (`Spelling`) and (on SQLite) rewritten by `str.replace`;
    for an enum's column (`MEMBERS`), one set check. It returns None when a value is spelled
    otherwise, and then `converter` takes each value."""
    members = MEMBERS.get((column.table.name, column.name))
    if members is not None:  # a whole column of an enum's values at once (else `_member_step`)
        allowed = frozenset({*members, None})
        return lambda values: values if allowed.issuperset(values) else None
    rewrite: tuple[tuple[str, str], ...]
    if isinstance(column.type, sa.Uuid):
        spelling, rewrite = UUID_SPELLING, (("-", ""),)
    elif isinstance(column.type, UTCDateTime):
        spelling, rewrite = UTC_SPELLING, (("T", " "), ("+00:00", ""))
    else:
        return None
    times = isinstance(column.type, UTCDateTime)

    def convert(values: tuple[Any, ...]) -> tuple[Any, ...] | None:
        present = [value for value in values if value is not None]
        if not present or not TEXT_OR_NULL.issuperset(map(type, present)):
            return None if present else values
        joined = spelling.joined(present)
        if joined is None:
            return None
        if times:
            deque(map(datetime.fromisoformat, present), maxlen=0)  # a day that does not exist
        if backend == "postgresql":
            return values  # COPY hands the server the text, which it parses itself
        for old, new in rewrite:
            joined = joined.replace(old, new)
        done = iter(joined.split(","))
        if len(present) == len(values):
            return tuple(done)
        return tuple(None if value is None else next(done) for value in values)

    return convert


def tuples(
    table: sa.Table,
    rows: list[dict[str, Any]],
    first_line: int,
    dialect: Dialect,
    omittable: frozenset[str] = frozenset(),
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The columns the rows carry, and each row as a tuple of driver values in that order.

    Works a column at a time (`zip` turns rows into columns and back, in C): the columns whose
    type needs it are converted, the others only checked to hold their type's JSON values (so
    both backends refuse the same values). A column of `omittable` that is null in every row is
    left out (the target stores null there all the same): SQLite's driver binds each null
    through its adapter lookup, about 4% of an import into SQLite."""
    keys = list(rows[0])
    if len(set(map(len, rows))) > 1:
        keys = sorted(set().union(*rows))
    unknown = set(keys) - set(table.columns.keys())
    if unknown:
        raise TransferError(
            f"Table {table.name!r} in the file has columns this Mnemos does not know: "
            "upgrade Mnemos",
            {"table": table.name, "columns": sorted(unknown)},
        )
    try:
        if len(keys) == 1:
            columns = [tuple(row[keys[0]] for row in rows)]
        else:
            columns = list(zip(*map(itemgetter(*keys), rows), strict=True))
    except KeyError as exc:
        raise TransferError(
            f"A row of {table.name!r} lacks column {exc.args[0]!r}; nothing imported",
            {"table": table.name, "column": exc.args[0]},
        ) from None
    for index, key in enumerate(keys):
        column, values = table.c[key], columns[index]
        shortcut = column_shortcut(column, dialect.name)
        step = converter(column, dialect)
        try:
            done = shortcut(values) if shortcut is not None else None
            if done is None and step is not None:
                done = tuple(map(step, values))
            elif done is None and not _taken(column, values):
                raise TypeError(key)
            columns[index] = values if done is None else done
        except (ValueError, TypeError, AttributeError, ArithmeticError):
            _refuse_value(table, key, values, step or _type_check(column), first_line)
    if omittable:
        kept = [
            index
            for index, key in enumerate(keys)
            if key not in omittable or not _all_null(columns[index])
        ]
        if len(kept) < len(keys):
            keys, columns = [keys[index] for index in kept], [columns[index] for index in kept]
    return keys, list(zip(*columns, strict=True))


def _all_null(values: tuple[Any, ...]) -> bool:
    # (`count` compares by identity first: fast on nulls, slow on text, so only when it may be)
    return values[0] is None and values[-1] is None and values.count(None) == len(values)


def _taken(column: sa.Column[Any], values: tuple[Any, ...]) -> bool:
    """Whether `values` may go into `column` as they are: of its JSON types, and text without
    NUL (every API refuses it, PostgreSQL cannot store it: a SQLite file holding it would
    not move)."""
    if not _accepted(column).issuperset(map(type, values)):
        return False
    return python_type(column) is not str or "\x00" not in "".join(filter(None, values))


def _accepted(column: sa.Column[Any]) -> frozenset[type]:
    """The JSON value types a column taken as it is accepts (any, for a type not listed)."""
    return ACCEPTED.get(python_type(column), ANY)


def _type_check(column: sa.Column[Any]) -> Step:
    accepted = _accepted(column)

    def check(value: Any) -> Any:
        if type(value) not in accepted or (type(value) is str and "\x00" in value):
            raise TypeError(value)
        return value

    return check


def _refuse_value(
    table: sa.Table, key: str, values: tuple[Any, ...], step: Step, first_line: int
) -> None:
    for offset, value in enumerate(values):
        try:
            step(value)
        except (ValueError, TypeError, AttributeError, ArithmeticError):
            raise TransferError(
                f"Line {first_line + offset}: {table.name}.{key} cannot be {value!r:.80}; "
                "nothing imported",
                {"line": first_line + offset, "table": table.name, "column": key},
            ) from None
    raise AssertionError("a value failed, then none did")  # pragma: no cover
