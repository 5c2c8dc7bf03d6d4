"""`mnemos import` into an empty database: the fast path (`transfer_import.py` uses it unless
`--merge`).

Row by row, each row pays for SQLAlchemy's statement work, for a B-tree insert in every index,
for each trigger and each foreign-key check. Into an empty database none of it is needed per row:

- values go from the file's JSON straight to the driver's form (`converter`): on SQLite a UUID
  loses its dashes and a UTC time is sliced into SQLite's text; PostgreSQL's `COPY` parses both
  itself, from the text as the file holds it;
- rows go in batches of `BATCH_ROWS` through the driver: `executemany` on SQLite; on
  PostgreSQL one `COPY` per table, which the batches feed in turn;
- secondary indexes, and on PostgreSQL the foreign keys, are set aside before the load and
  built again after it from their own definitions, read back from the database; the triggers
  that derive data from a new memory (`REPLAYED`) are set aside and their work is done once
  after the load, one set-based statement each. Any other trigger stays and fires per row.

All of it happens inside the import's one transaction (PostgreSQL's DDL is transactional; SQLite
drops and creates indexes inside it too), so a refused file leaves the target as it was. A value
the target cannot take (not a UUID, not a time, a null where none may be, a key twice) is
refused with `TransferError`, naming the line when it can.
"""

from __future__ import annotations

import math
import re
import typing
import uuid
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from datetime import datetime
from enum import StrEnum
from operator import itemgetter
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect

from mnemos.domain.models import ActorType, HistoryEvent, Memory
from mnemos.storage.schema import UTCDateTime
from mnemos.storage.sql_base import driver_connection
from mnemos.storage.sqlite import INDEX_REFILL_SQL, INDEX_TRIGGER
from mnemos.storage.transfer import TransferError, decoder, python_type

BATCH_ROWS = 10_000
MAINTENANCE_MEMORY = "256MB"  # PostgreSQL: sort memory for the index builds after the load
SQLITE_CACHE_KIB = 262_144  # SQLite: page cache for the load (the default 2 MiB spills to disk)

REPLAYED = {
    INDEX_TRIGGER: INDEX_REFILL_SQL,
    "memories_vector_queue": (
        "INSERT INTO vector_queue (tenant_id, memory_pk) SELECT tenant_id, pk FROM memories"
    ),
}
"""Triggers set aside for the load, by name, and the statement that does for every loaded row
what the trigger does for one: fill SQLite's FTS5 index (`sqlite.INDEX_REFILL_SQL`), queue every
memory for embedding (migration 0010). A test compares the result with a row-by-row import."""

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
UUID_RUN, UTC_RUN = (re.compile(f"{one}(?:,{one})*").fullmatch for one in (UUID, UTC))
"""A UUID and a time as the exporter writes them (`str(uuid)`, `datetime.isoformat()` in UTC),
alone and as a comma-separated run; any other spelling takes the general path (and a wrong one
is refused there)."""


# --- values ----------------------------------------------------------------------------------


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
        return dumps(value).decode()

    return text


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
    values joined, checked by one regular expression and (on SQLite) rewritten by `str.replace`;
    for an enum's column (`MEMBERS`), one set check. It returns None when a value is spelled
    otherwise, and then `converter` takes each value."""
    members = MEMBERS.get((column.table.name, column.name))
    if members is not None:  # a whole column of an enum's values at once (else `_member_step`)
        allowed = frozenset({*members, None})
        return lambda values: values if allowed.issuperset(values) else None
    rewrite: tuple[tuple[str, str], ...]
    if isinstance(column.type, sa.Uuid):
        run, width, rewrite = UUID_RUN, 36, (("-", ""),)
    elif isinstance(column.type, UTCDateTime):
        run, width, rewrite = UTC_RUN, 32, (("T", " "), ("+00:00", ""))
    else:
        return None
    times = isinstance(column.type, UTCDateTime)

    def convert(values: tuple[Any, ...]) -> tuple[Any, ...] | None:
        present = [value for value in values if value is not None]
        if not present or not TEXT_OR_NULL.issuperset(map(type, present)):
            return None if present else values
        joined = ",".join(present)
        if len(joined) != len(present) * (width + 1) - 1 or not run(joined):
            return None  # (the width: one value per value, none holding a comma)
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
    table: sa.Table, rows: list[dict[str, Any]], first_line: int, dialect: Dialect
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The columns the rows carry, and each row as a tuple of driver values in that order.

    Works a column at a time (`zip` turns rows into columns and back, in C): the columns whose
    type needs it are converted, the others only checked to hold their type's JSON values (so
    both backends refuse the same values)."""
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
            elif done is None and not _accepted(column).issuperset(map(type, values)):
                raise TypeError(key)
            columns[index] = values if done is None else done
        except (ValueError, TypeError, AttributeError, ArithmeticError):
            _refuse_value(table, key, values, step or _type_check(column), first_line)
    return keys, list(zip(*columns, strict=True))


def _accepted(column: sa.Column[Any]) -> frozenset[type]:
    """The JSON value types a column taken as it is accepts (any, for a type not listed)."""
    return ACCEPTED.get(python_type(column), ANY)


def _type_check(column: sa.Column[Any]) -> Step:
    accepted = _accepted(column)

    def check(value: Any) -> Any:
        if type(value) not in accepted:
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


# --- loading ---------------------------------------------------------------------------------


class Loader:
    """Rows into the empty tables of one transaction, through the driver.

    On PostgreSQL the rows of one table go through one `COPY` however many batches bring them:
    the server works on the rows while the next batch is read and checked, where a `COPY` per
    batch made each side wait for the other at its end. `finish` ends it (before any other
    statement on the connection)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.dialect = conn.dialect
        self.errors = bad_data_errors(conn)
        self._copy: _Copy | None = None

    def write(self, table: sa.Table, rows: list[dict[str, Any]], first_line: int) -> None:
        if not rows:
            return
        keys, values = tuples(table, rows, first_line, self.dialect)
        self.write_values(table, keys, values, first_line)

    def write_values(
        self, table: sa.Table, keys: list[str], values: list[tuple[Any, ...]], first_line: int
    ) -> None:
        """Rows already in the driver's values (`tuples`), from consecutive lines of the file."""
        if not values:
            return
        quote = self.dialect.identifier_preparer.quote
        names = ", ".join(quote(key) for key in keys)
        if self.dialect.name == "postgresql":
            statement = f"COPY {quote(table.name)} ({names}) FROM STDIN"
            if self._copy is None or self._copy.statement != statement:
                self.finish()
                self._copy = _Copy(self.conn, statement, str(table.name), self.errors)
            self._copy.write(values, first_line)
            return
        marks = ", ".join("?" for _ in keys)
        statement = f"INSERT INTO {quote(table.name)} ({names}) VALUES ({marks})"
        try:
            driver_connection(self.conn).executemany(statement, values)
        except self.errors as exc:
            raise refusal(exc, table.name, lambda line: first_line + line - 1) from None

    def finish(self) -> None:
        """End the open `COPY`, if any: its rows are then all in (or refused)."""
        copy, self._copy = self._copy, None
        if copy is not None:
            copy.close()

    def abort(self) -> None:
        """Stop the open `COPY`, if any, keeping none of it (the import failed elsewhere)."""
        copy, self._copy = self._copy, None
        if copy is not None:
            copy.abort()


class _Copy:
    """One open `COPY ... FROM STDIN` and where in the file each of its lines came from."""

    def __init__(
        self, conn: Connection, statement: str, table: str, errors: tuple[type[Exception], ...]
    ) -> None:
        self.statement, self.table, self.errors = statement, table, errors
        self.starts: list[tuple[int, int]] = []  # (first COPY line of a batch, its file line)
        self.lines = 0
        self.stack = ExitStack()
        try:
            cursor = self.stack.enter_context(driver_connection(conn).cursor())
            self.copy = self.stack.enter_context(cursor.copy(statement))
        except errors as exc:
            self._refuse(exc)

    def write(self, values: list[tuple[Any, ...]], first_line: int) -> None:
        self.starts.append((self.lines + 1, first_line))
        self.lines += len(values)
        write_row = self.copy.write_row
        try:
            for row in values:
                write_row(row)
        except self.errors as exc:
            self._refuse(exc)

    def close(self) -> None:
        try:
            self.stack.close()
        except self.errors as exc:
            raise refusal(exc, self.table, self.file_line) from None

    def file_line(self, line: int) -> int:
        """The file's line of this COPY's `line` (counted from 1)."""
        start, first = self.starts[bisect_right(self.starts, (line, math.inf)) - 1]
        return first + line - start

    def _refuse(self, exc: Exception) -> None:
        error = refusal(exc, self.table, self.file_line if self.starts else None)
        self.abort()
        raise error from None

    def abort(self) -> None:
        """End the COPY with nothing of it kept (the transaction is rolled back then)."""
        stopped = TransferError("import stopped")
        with suppress(Exception):  # the server's answer to CopyFail, or the one that stopped it
            self.stack.__exit__(TransferError, stopped, None)


def bad_data_errors(conn: Connection) -> tuple[type[Exception], ...]:
    """The driver's errors that mean the rows, not the database, are at fault (PEP 249 names,
    and SQLAlchemy's wrappers of them)."""
    dbapi = conn.dialect.loaded_dbapi
    return (dbapi.DataError, dbapi.IntegrityError, sa.exc.DataError, sa.exc.IntegrityError)


_COPY_LINE = re.compile(r"\bline (\d+)")


def refusal(
    exc: Exception, table: str | None, file_line: Callable[[int], int] | None = None
) -> TransferError:
    """The target's refusal of loaded rows, as the import's refusal (what, and where if known:
    `file_line` turns the line COPY names into the file's)."""
    driver = getattr(exc, "orig", None) or exc
    reason = " ".join(str(driver).split())
    details: dict[str, Any] = {"reason": reason}
    what = "the loaded rows"
    if table is not None:
        details["table"] = table
        what = f"a row of {table!r}"
    context = getattr(getattr(driver, "diag", None), "context", None) or ""
    found = _COPY_LINE.search(context)
    if found and file_line is not None:
        details["line"] = file_line(int(found.group(1)))
        what += f" (line {details['line']})"
    return TransferError(f"The target refused {what}: {reason}; nothing imported", details)


@contextmanager
def bulk_load(conn: Connection, tables: list[str]) -> Iterator[Loader]:
    """Set indexes, foreign keys and the `REPLAYED` triggers aside, yield a loader for the
    empty `tables`, then do the triggers' work once and build everything again. Rows that break
    a constraint then (a key twice, a missing parent) are refused as `TransferError`."""
    if conn.dialect.name == "postgresql":
        restore = _postgres_aside(conn, tables)
    else:
        restore = _sqlite_aside(conn)
    loader = Loader(conn)
    try:
        yield loader
    except BaseException:
        loader.abort()  # a refusal found while a COPY was open: the connection can roll back
        raise
    loader.finish()
    errors = bad_data_errors(conn)
    for statement in restore:
        try:
            conn.exec_driver_sql(statement)
        except errors as exc:
            raise refusal(exc, None) from None


def _sqlite_aside(conn: Connection) -> list[str]:
    """SQLite: drop every named index and the replayed triggers; return what restores them.
    (A unique constraint's own index stays: SQLite cannot drop it.)"""
    conn.exec_driver_sql(f"PRAGMA cache_size = -{SQLITE_CACHE_KIB}")
    saved = conn.exec_driver_sql(
        "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND "
        f"(type = 'index' OR (type = 'trigger' AND name IN ({', '.join('?' * len(REPLAYED))})))",
        tuple(REPLAYED),
    ).all()
    for kind, name, _ in saved:
        conn.exec_driver_sql(f'DROP {kind.upper()} "{name}"')
    replays = [REPLAYED[name] for kind, name, _ in saved if kind == "trigger"]
    return [*replays, *(sql for _, _, sql in saved)]


def _postgres_aside(conn: Connection, tables: list[str]) -> list[str]:
    """PostgreSQL: drop the foreign keys of the schema, the indexes of `tables` that back no
    constraint, and disable the replayed triggers; return what restores them."""
    conn.exec_driver_sql(f"SET LOCAL maintenance_work_mem = '{MAINTENANCE_MEMORY}'")
    keys = conn.exec_driver_sql(
        "SELECT conrelid::regclass::text, quote_ident(conname), pg_get_constraintdef(oid) "
        "FROM pg_constraint WHERE contype = 'f' AND connamespace = current_schema()::regnamespace"
    ).all()
    indexes = conn.exec_driver_sql(
        "SELECT i.oid::regclass::text, pg_get_indexdef(i.oid) FROM pg_index x "
        "JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
        "WHERE t.relnamespace = current_schema()::regnamespace AND t.relname = ANY(%(tables)s) "
        "AND NOT EXISTS (SELECT FROM pg_constraint c WHERE c.conindid = i.oid "
        "AND c.contype IN ('p', 'u', 'x'))",
        {"tables": tables},
    ).all()
    triggers = conn.exec_driver_sql(
        "SELECT tgrelid::regclass::text, quote_ident(tgname), tgname FROM pg_trigger "
        "WHERE tgname = ANY(%(names)s) AND NOT tgisinternal "
        "AND tgrelid::regclass::text = ANY(%(tables)s)",
        {"names": list(REPLAYED), "tables": tables},
    ).all()
    for table, name, _ in keys:
        conn.exec_driver_sql(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
    for name, _ in indexes:
        conn.exec_driver_sql(f"DROP INDEX {name}")
    for table, name, _ in triggers:
        conn.exec_driver_sql(f"ALTER TABLE {table} DISABLE TRIGGER {name}")
    return [
        *(f"ALTER TABLE {table} ENABLE TRIGGER {name}" for table, name, _ in triggers),
        *(REPLAYED[raw] for _, _, raw in triggers),
        *(definition for _, definition in indexes),
        *(f"ALTER TABLE {table} ADD CONSTRAINT {name} {spec}" for table, name, spec in keys),
    ]
