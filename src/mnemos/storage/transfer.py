"""Moving a whole database between backends: `mnemos export` and `mnemos import`.

The file is NDJSON: a header line, one line per row, and a trailer with the row count of every
table. Nothing here names a table or a column: they come from `schema.metadata`, walked in
foreign-key order, so a table added there is carried without a change here. What is not in the
metadata is not carried and need not be: the search indexes (SQLite's FTS5 table, filled by
triggers; PostgreSQL's generated `tsvector` column) are rebuilt by the target as rows arrive.

```
{"format": "mnemos-export", "version": 1, "mnemos": "0.1.0", "revision": "0008", ...}
{"t": "organizations", "r": {"id": "…", "name": "Acme", "inserted_at": "2026-…+00:00", …}}
…
{"end": true, "rows": {"organizations": 3, …}}
```

Values are JSON as orjson writes them (UUIDs and times as strings, JSON columns as JSON); bytes
as base64. An import reads each column back by its type in the target's metadata. An import is
one transaction: a file that ends early (no trailer, a cut line) is refused and nothing of it
stays.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Engine

from mnemos import __version__
from mnemos.errors import MnemosError
from mnemos.storage import backend
from mnemos.storage.schema import metadata
from mnemos.storage.sql_base import driver_connection

FORMAT = "mnemos-export"
FORMAT_VERSION = 1
BATCH_ROWS = 2000

SKIPPED_TABLES = frozenset({"idempotency_keys"})
"""Not exported: replay records of recent requests, worthless on another server."""

REPLACED_TABLES = frozenset({"server_secrets"})
"""Written over what the target holds (a database that has served once already has its own
secrets, and no data); so cursors and Mnemos-issued tokens keep working after a move. With
`--merge` the target's own are kept."""


class TransferError(MnemosError):
    """The file or the target database cannot take part in this export or import."""

    status = 400
    code = "transfer_refused"


Progress = Callable[[int], None]
"""Told how many bytes (import) or rows (export) were just handled."""


def _nothing(_: int) -> None:
    return None


@dataclass
class Summary:
    """What an import or export did, table by table (rows written; rows skipped by --merge)."""

    rows: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "tables": {
                name: {"rows": count, "skipped": self.skipped.get(name, 0)}
                for name, count in self.rows.items()
            },
            "rows": sum(self.rows.values()),
            "skipped": sum(self.skipped.values()),
        }


def exported_tables() -> list[sa.Table]:
    """Every table of the schema a file carries, parents before children."""
    return [table for table in metadata.sorted_tables if table.name not in SKIPPED_TABLES]


def connect(url: str, *, write: bool) -> Engine:
    """An engine for one export or import: a snapshot to read from, or one write transaction."""
    engine = sa.create_engine(backend(url).migration_url(url))
    if engine.dialect.name == "sqlite":

        @sa.event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # BEGIN is ours (below)
            dbapi_conn.execute("PRAGMA busy_timeout=30000")
            dbapi_conn.execute("PRAGMA foreign_keys=ON")

        @sa.event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine
    level = "SERIALIZABLE" if write else "REPEATABLE READ"
    return engine.execution_options(isolation_level=level)


# --- values ----------------------------------------------------------------------------------


def _python_type(column: sa.Column[Any]) -> type | None:
    kind = column.type
    if isinstance(kind, sa.TypeDecorator):
        kind = kind.impl_instance
    try:
        found: type = kind.python_type
    except NotImplementedError:
        return None
    return found


def _encoder(column: sa.Column[Any]) -> Callable[[Any], Any] | None:
    """How a column's value becomes JSON, when orjson cannot write it as it comes."""
    if _python_type(column) is bytes:
        return lambda value: None if value is None else base64.b64encode(value).decode()
    return None


def _decoder(column: sa.Column[Any]) -> Callable[[Any], Any] | None:
    """How a JSON value becomes the column's Python value again (None: as it is)."""
    kind = _python_type(column)
    if kind is uuid.UUID:
        return lambda value: None if value is None else uuid.UUID(value)
    if kind is datetime:
        return lambda value: None if value is None else datetime.fromisoformat(value)
    if kind is bytes:
        return lambda value: None if value is None else base64.b64decode(value)
    return None


# --- export ----------------------------------------------------------------------------------


def header(conn: Connection) -> dict[str, Any]:
    revision = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "mnemos": __version__,
        "revision": revision,
        "backend": conn.dialect.name,
        "tables": [table.name for table in exported_tables()],
    }


def _keyset(table: sa.Table, conn: Connection) -> Iterator[Sequence[sa.Row[Any]]]:
    """The table's rows in primary-key order, `BATCH_ROWS` at a time (constant memory)."""
    key = list(table.primary_key.columns)
    after: tuple[Any, ...] | None = None
    while True:
        query = sa.select(table).order_by(*key).limit(BATCH_ROWS)
        if after is not None:
            query = query.where(sa.tuple_(*key) > sa.tuple_(*after))
        rows = conn.execute(query).all()
        if not rows:
            return
        yield rows
        last = rows[-1]._mapping
        after = tuple(last[column.name] for column in key)


def export_database(
    url: str, out: IO[bytes], progress: Progress = _nothing, totals: dict[str, int] | None = None
) -> Summary:
    """Write the whole database at `url` to `out`, as one consistent snapshot."""
    summary = Summary()
    engine = connect(url, write=False)
    try:
        with engine.begin() as conn:
            out.write(orjson.dumps(header(conn)) + b"\n")
            for table in exported_tables():
                if totals is not None:
                    totals[str(table.name)] = conn.execute(
                        sa.select(sa.func.count()).select_from(table)
                    ).scalar_one()
            for table in exported_tables():
                summary.rows[str(table.name)] = _export_table(conn, table, out, progress)
            out.write(orjson.dumps({"end": True, "rows": summary.rows}) + b"\n")
    finally:
        engine.dispose()
    return summary


def _export_table(conn: Connection, table: sa.Table, out: IO[bytes], progress: Progress) -> int:
    names = [str(column.name) for column in table.columns]
    encoders = [(str(column.name), _encoder(column)) for column in table.columns]
    converted = [(name, encode) for name, encode in encoders if encode is not None]
    prefix = b'{"t":' + orjson.dumps(table.name) + b',"r":'
    count = 0
    for rows in _keyset(table, conn):
        lines = []
        for row in rows:
            record = dict(zip(names, row, strict=True))
            for name, encode in converted:
                record[name] = encode(record[name])
            lines.append(prefix + orjson.dumps(record) + b"}\n")
        out.write(b"".join(lines))
        count += len(rows)
        progress(len(rows))
    return count


# --- import ----------------------------------------------------------------------------------


def check_header(line: bytes) -> dict[str, Any]:
    """The header of an export file, or a clear refusal."""
    try:
        found = orjson.loads(line)
    except orjson.JSONDecodeError:
        found = None
    if not isinstance(found, dict) or found.get("format") != FORMAT:
        raise TransferError("Not a Mnemos export file (no header line)")
    version = found.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise TransferError(
            f"Export format version {version} is newer than this Mnemos reads "
            f"({FORMAT_VERSION}): upgrade Mnemos to import it",
            {"version": version, "supported": FORMAT_VERSION},
        )
    return found


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
        (column.name, decode)
        for column in table.columns
        if (decode := _decoder(column)) is not None
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
    url: str, lines: Iterable[bytes], *, merge: bool = False, progress: Progress = _nothing
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
    index filled once at the end)."""
    if merge or conn.dialect.name != "sqlite":
        return nullcontext()
    from mnemos.storage.sqlite import search_index_deferred

    return search_index_deferred(conn)


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
    conn.execute(target.statement, target.rows(batch))
    written = _count(conn, target.table) - before
    summary.skipped[name] = summary.skipped.get(name, 0) + len(batch) - written
    summary.rows[name] = summary.rows.get(name, 0) + written


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
    values = [
        tuple(step(row[key]) if step else row[key] for key, step in zip(order, steps, strict=True))
        for row in batch
    ]
    if dialect.name != "postgresql":
        conn.exec_driver_sql(str(compiled), values)
        return
    quote = dialect.identifier_preparer.quote
    columns = ", ".join(quote(key) for key in order)
    statement = f"COPY {quote(target.table.name)} ({columns}) FROM STDIN"
    with driver_connection(conn).cursor() as cursor, cursor.copy(statement) as copy:
        for row in values:
            copy.write_row(row)


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
