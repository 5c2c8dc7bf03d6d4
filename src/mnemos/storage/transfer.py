"""Moving a whole database between backends: `mnemos export` and `mnemos import`.

The file is NDJSON (read back by `transfer_import.py`): a header line, one line per row, and a
trailer with the row count of every table. Nothing here names a table or a column: they come
from `schema.metadata`, walked in foreign-key order, so a table added there is carried without
a change here. What is not in the metadata is not carried and need not be: the search indexes
(SQLite's FTS5 table, filled by triggers; PostgreSQL's generated `tsvector` column) are rebuilt
by the target as rows arrive.

```
{"format": "mnemos-export", "version": 1, "mnemos": "0.1.0", "revision": "0008", ...}
{"t": "organizations", "r": {"id": "…", "name": "Acme", "inserted_at": "2026-…+00:00", …}}
…
{"end": true, "rows": {"organizations": 3, …}}
```

Values are JSON as orjson writes them (UUIDs and times as strings, JSON columns as JSON); bytes
as base64; U+2028, U+2029 and U+0085 escaped (`mnemos.ndjson.line_safe`), so a line is a row
for any line reader. An import reads each column back by its type in the target's metadata. An
import is one transaction: a file that ends early (no trailer, a cut line) is refused and
nothing of it stays.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from mnemos import __version__
from mnemos.errors import MnemosError
from mnemos.ndjson import line_safe
from mnemos.storage import backend
from mnemos.storage.schema import metadata
from mnemos.storage.sqlite_engine import begin_explicitly

FORMAT = "mnemos-export"
FORMAT_VERSION = 1
BATCH_ROWS = 2000
AS_JSON = orjson.OPT_SERIALIZE_NUMPY  # a vector column may read back as a numpy array

SKIPPED_TABLES = frozenset({"memory_vectors", "vector_queue", "vector_tail", "vector_chunks"})
"""Not exported: vectors, derived from content and keyed by row numbers that `--merge`
renumbers: every imported memory is queued for embedding by the database's own trigger
(`mnemos reindex` or the server's embedding workers rebuild them)."""

MERGE_KEYS = {"memories": ("id",), "memory_history": ("memory_id", "event", "at")}
"""What identifies a row of a table whose primary key the target numbers itself with --merge:
an imported row the target already holds by these columns is skipped."""

NOT_MERGED = frozenset({"tuya_tokens", "idempotency_keys"})
"""Left out by `--merge` (counted as skipped): Tuya's access and refresh token pairs live for
hours and are replaced at each refresh; a pair from an older file would be valid again in a
target that replaced it (a connector signs in again with its project's secret). Idempotency
keys are a day's replay records of the server the file came from: a move (a plain import)
carries them with their `inserted_at`, so a store retried after it, within the key's day, is
answered with the memory it stored (review23, finding 3); a merge is not that server, and a key
may name a memory the merge skipped."""

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


def nothing(_: int) -> None:
    return None


@dataclass
class Summary:
    """What an import or export did, table by table (rows written; rows skipped by --merge)."""

    rows: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    erased: dict[str, int] = field(default_factory=dict)  # of `skipped`: about an erased person

    def as_json(self) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "tables": {
                name: {"rows": count, "skipped": self.skipped.get(name, 0)}
                | ({"erased": self.erased[name]} if self.erased.get(name) else {})
                for name, count in self.rows.items()
            },
            "rows": sum(self.rows.values()),
            "skipped": sum(self.skipped.values()),
        }
        if any(self.erased.values()):
            answer["erased"] = sum(self.erased.values())
        return answer


def exported_tables() -> list[sa.Table]:
    """Every table of the schema a file carries, parents before children."""
    return [table for table in metadata.sorted_tables if table.name not in SKIPPED_TABLES]


def connect(url: str, *, write: bool) -> Engine:
    """An engine for one export or import: a snapshot to read from, or one write transaction."""
    engine = sa.create_engine(backend(url).migration_url(url))
    if engine.dialect.name == "sqlite":
        begin_explicitly(engine, "BEGIN IMMEDIATE" if write else "BEGIN")

        @sa.event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.execute("PRAGMA busy_timeout=30000")
            dbapi_conn.execute("PRAGMA foreign_keys=ON")

        return engine
    level = "SERIALIZABLE" if write else "REPEATABLE READ"
    return engine.execution_options(isolation_level=level)


# --- values ----------------------------------------------------------------------------------


def python_type(column: sa.Column[Any]) -> type | None:
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
    if python_type(column) is bytes:
        return lambda value: None if value is None else base64.b64encode(value).decode()
    return None


def decoder(column: sa.Column[Any]) -> Callable[[Any], Any] | None:
    """How a JSON value becomes the column's Python value again (None: as it is)."""
    kind = python_type(column)
    if kind is uuid.UUID:
        return lambda value: None if value is None else uuid.UUID(value)
    if kind is datetime:
        return lambda value: None if value is None else _aware(datetime.fromisoformat(value))
    if kind is bytes:
        return lambda value: None if value is None else base64.b64decode(value)
    return None


def _aware(moment: datetime) -> datetime:
    """A time with its offset; one without would be read as the importing machine's local time."""
    if moment.tzinfo is None:
        raise ValueError("a time without a UTC offset")
    return moment


# --- export ----------------------------------------------------------------------------------


def header(conn: Connection) -> dict[str, Any]:
    if not sa.inspect(conn).has_table("alembic_version"):
        raise TransferError(
            "The database holds no Mnemos schema: nothing to export (`mnemos migrate` makes one)"
        )
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
    url: str, out: IO[bytes], progress: Progress = nothing, totals: dict[str, int] | None = None
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
            lines.append(prefix + orjson.dumps(record, option=AS_JSON) + b"}\n")
        out.write(line_safe(b"".join(lines)))
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
