"""`mnemos import`: an export file into a database, in one transaction (`transfer.py` has the
format). Into an empty database rows skip SQLAlchemy's per-row work (the driver's executemany
on SQLite, with the search index filled once at the end; COPY on PostgreSQL); with `--merge`
rows whose key exists are skipped and counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from mnemos.storage.schema import metadata
from mnemos.storage.sql_base import driver_connection
from mnemos.storage.transfer import (
    BATCH_ROWS,
    MERGE_KEYS,
    REPLACED_TABLES,
    SKIPPED_TABLES,
    Progress,
    Summary,
    TransferError,
    check_header,
    connect,
    decoder,
    exported_tables,
    nothing,
)


def occupied_tables(conn: Connection) -> list[str]:
    """Tables that already hold rows (secrets aside: a server that ran once has its own)."""
    return [
        table.name
        for table in exported_tables()
        if table.name not in REPLACED_TABLES
        and conn.execute(sa.select(sa.literal(1)).select_from(table).limit(1)).first() is not None
    ]


@dataclass
class _Target:
    """One table of the target: how to decode a row of it and how to insert a batch."""

    table: sa.Table
    decoders: list[tuple[str, Callable[[Any], Any]]]
    statement: Any
    merge: bool
    dropped: str | None  # a surrogate key the target assigns itself (with --merge)

    def rows(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for record in records:
            for name, decode in self.decoders:
                if name in record:
                    record[name] = decode(record[name])
            if self.dropped is not None:
                record.pop(self.dropped, None)
        return records


def _surrogate_key(table: sa.Table) -> str | None:
    """An autoincrement integer primary key no foreign key points at: with --merge the target
    numbers incoming rows itself (the rows' own unique ids decide what already exists)."""
    key = table.autoincrement_column
    if key is None:
        return None
    referenced = any(
        fk.column is key for other in metadata.tables.values() for fk in other.foreign_keys
    )
    return None if referenced else key.name


def _target(conn: Connection, name: str, merge: bool) -> _Target:
    table = metadata.tables.get(name)
    if table is None or name in SKIPPED_TABLES:
        raise TransferError(
            f"The file holds table {name!r}, which this Mnemos does not know: upgrade Mnemos",
            {"table": name},
        )
    decoders = [
        (column.name, decode) for column in table.columns if (decode := decoder(column)) is not None
    ]
    dropped = _surrogate_key(table) if merge else None
    statement: Any = table.insert()
    if merge:
        insert = sqlite_insert if conn.dialect.name == "sqlite" else pg_insert
        statement = insert(table).on_conflict_do_nothing()
    elif name in REPLACED_TABLES:
        conn.execute(table.delete())
    return _Target(table, decoders, statement, merge, dropped)


def _records(lines: Iterable[bytes], progress: Progress) -> Iterator[tuple[str, dict[str, Any]]]:
    """(table, row) for every row line, until the trailer, whose counts must match."""
    counted: dict[str, int] = {}
    for number, line in enumerate(lines, start=2):
        progress(len(line))
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise TransferError(
                f"Line {number} is not JSON: the file is cut short or damaged; nothing imported",
                {"line": number},
            ) from None
        if record.get("end") is True:
            expected = record.get("rows")
            listed = {k: v for k, v in expected.items() if v} if isinstance(expected, dict) else {}
            if listed != counted:
                raise TransferError(
                    "The row counts in the trailer differ from the rows read; nothing imported"
                )
            return
        table, row = record.get("t"), record.get("r")
        if not isinstance(table, str) or not isinstance(row, dict):
            raise TransferError(f"Line {number} is not a row record", {"line": number})
        counted[table] = counted.get(table, 0) + 1
        yield table, row
    raise TransferError("The file ends before its trailer (cut short?); nothing imported")


def import_database(
    url: str, lines: Iterable[bytes], *, merge: bool = False, progress: Progress = nothing
) -> Summary:
    """Load an export into the (migrated) database at `url` in one transaction.

    Refuses a target that holds data unless `merge`; then rows whose primary or unique key
    exists are skipped and counted. Raises `TransferError` (and keeps nothing) on a bad file.
    """
    stream = iter(lines)
    check_header(next(stream, b""))
    summary = Summary()
    engine = connect(url, write=True)
    try:
        with engine.begin() as conn:
            if not merge and (occupied := occupied_tables(conn)):
                raise TransferError(
                    "The target database is not empty: import into a new one, or pass --merge",
                    {"tables": occupied},
                )
            with _bulk_load(conn, merge):
                targets = _load(conn, stream, merge, summary, progress)
            _after_import(conn, targets.values())
    finally:
        engine.dispose()
    return summary


def _bulk_load(conn: Connection, merge: bool) -> AbstractContextManager[None]:
    """A backend's way to load many rows into an empty database faster (SQLite: the search
    indexes built once at the end)."""
    if merge or conn.dialect.name != "sqlite":
        return nullcontext()
    from mnemos.storage.sqlite import indexes_deferred

    return indexes_deferred(conn)


def _load(
    conn: Connection,
    stream: Iterator[bytes],
    merge: bool,
    summary: Summary,
    progress: Progress,
) -> dict[str, _Target]:
    targets: dict[str, _Target] = {}
    batch: list[dict[str, Any]] = []
    current: str | None = None
    for name, row in _records(stream, progress):
        if name != current or len(batch) >= BATCH_ROWS:
            if current is not None:
                _flush(conn, targets[current], batch, summary)
            if name not in targets:
                targets[name] = _target(conn, name, merge)
            current, batch = name, []
        batch.append(row)
    if current is not None:
        _flush(conn, targets[current], batch, summary)
    return targets


def _count(conn: Connection, table: sa.Table) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


def _flush(
    conn: Connection, target: _Target, batch: list[dict[str, Any]], summary: Summary
) -> None:
    if not batch:
        return
    name = str(target.table.name)
    unknown = set().union(*(row.keys() for row in batch)) - set(target.table.columns.keys())
    if unknown:
        raise TransferError(
            f"Table {name!r} in the file has columns this Mnemos does not know: upgrade Mnemos",
            {"table": name, "columns": sorted(unknown)},
        )
    if not target.merge:
        _bulk_insert(conn, target, batch)
        summary.rows[name] = summary.rows.get(name, 0) + len(batch)
        return
    before = _count(conn, target.table)
    rows = _not_held(conn, target.table, target.rows(batch))
    if rows:
        conn.execute(target.statement, rows)
    written = _count(conn, target.table) - before
    summary.skipped[name] = summary.skipped.get(name, 0) + len(batch) - written
    summary.rows[name] = summary.rows.get(name, 0) + written


def _not_held(
    conn: Connection, table: sa.Table, rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """With --merge, the rows of a table whose key the target numbers itself (`MERGE_KEYS`)
    that the target does not already hold by their natural key."""
    natural = MERGE_KEYS.get(str(table.name))
    if natural is None or not rows:
        return rows
    columns = [table.c[name] for name in natural]
    firsts = {row[natural[0]] for row in rows}
    held = set(map(tuple, conn.execute(sa.select(*columns).where(columns[0].in_(firsts)))))
    return [row for row in rows if tuple(row[name] for name in natural) not in held]


def _bulk_insert(conn: Connection, target: _Target, batch: list[dict[str, Any]]) -> None:
    """Rows into an empty table, past SQLAlchemy's per-row work: each value decoded and bound
    by its column's own processors, then the driver's executemany (SQLite) or COPY
    (PostgreSQL). Rows of a table all carry the same columns (one exporter wrote them)."""
    dialect = conn.dialect
    keys = list(batch[0])
    if any(len(row) != len(keys) for row in batch):
        conn.execute(target.statement, target.rows(batch))
        return
    compiled = target.table.insert().compile(dialect=dialect, column_keys=keys)
    order = list(compiled.positiontup or keys)
    decoders = dict(target.decoders)
    steps = [
        _compose(
            decoders.get(key),
            target.table.c[key].type.dialect_impl(dialect).bind_processor(dialect),
        )
        for key in order
    ]
    pick = itemgetter(*order)
    convert = [(index, step) for index, step in enumerate(steps) if step is not None]
    values: list[tuple[Any, ...]] = []
    try:
        for record in batch:
            picked = list(pick(record)) if len(order) > 1 else [pick(record)]
            for index, step in convert:
                picked[index] = step(picked[index])
            values.append(tuple(picked))
    except KeyError as exc:
        raise TransferError(
            f"A row of {target.table.name!r} lacks column {exc.args[0]!r}; nothing imported"
        ) from None
    if dialect.name != "postgresql":
        conn.exec_driver_sql(str(compiled), values)
        return
    quote = dialect.identifier_preparer.quote
    columns = ", ".join(quote(key) for key in order)
    statement = f"COPY {quote(target.table.name)} ({columns}) FROM STDIN"
    with driver_connection(conn).cursor() as cursor, cursor.copy(statement) as copy:
        for line in values:
            copy.write_row(line)


def _compose(
    first: Callable[[Any], Any] | None, then: Callable[[Any], Any] | None
) -> Callable[[Any], Any] | None:
    if first is None or then is None:
        return first or then
    return lambda value: then(first(value))


def _after_import(conn: Connection, targets: Iterable[_Target]) -> None:
    """PostgreSQL: move each serial key's sequence past the rows the file brought."""
    if conn.dialect.name != "postgresql":
        return
    for target in targets:
        column = target.table.autoincrement_column
        if column is None:
            continue
        name, col = target.table.name, column.name
        conn.execute(
            sa.text(
                f"SELECT setval(pg_get_serial_sequence('{name}', '{col}'), "
                f"coalesce((SELECT max({col}) FROM {name}), 0) + 1, false)"
            )
        )
