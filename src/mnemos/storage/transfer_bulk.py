"""`mnemos import` into an empty database: the fast path (`transfer_import.py` uses it unless
`--merge`).

Row by row, each row pays for SQLAlchemy's statement work, for a B-tree insert in every index,
for each trigger and each foreign-key check. Into an empty database none of it is needed per row:

- values go from the file's JSON straight to the driver's form (`transfer_values.py`): on
  SQLite a UUID loses its dashes and a UTC time is sliced into SQLite's text; PostgreSQL's
  `COPY` parses both itself, from the text as the file holds it;
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
from bisect import bisect_right
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mnemos.storage.sql_base import driver_connection
from mnemos.storage.sqlite import INDEX_REFILL, INDEX_TRIGGER
from mnemos.storage.transfer import TransferError
from mnemos.storage.transfer_values import tuples

BATCH_ROWS = 10_000
MAINTENANCE_MEMORY = "256MB"  # PostgreSQL: sort memory for the index builds after the load
SQLITE_CACHE_KIB = 262_144  # SQLite: page cache for the load (the default 2 MiB spills to disk)
SQLITE_SORTER_THREADS = 2  # SQLite: helper threads of each CREATE INDEX's sorter
SQLITE_SORT_RUN_KIB = 32_768  # SQLite: page cache while the indexes build, which sizes a sort run
SQLITE_INDEX_BUILDS = (
    f"PRAGMA threads = {SQLITE_SORTER_THREADS}",
    f"PRAGMA cache_size = -{SQLITE_SORT_RUN_KIB}",
)
"""Run before SQLite's indexes are built again after the load. CREATE INDEX sorts its entries in
runs as large as the page cache: with the load's 256 MiB, a 1,000,000-memory index is one run,
sorted on the importing thread. With 32 MiB runs and sorter threads, SQLite sorts each full run,
and merges them, on a helper thread while the importing thread reads on: about half of the
builds' CPU (7 of 13-15 s at 1,000,000) leaves the importing thread, for 1-2 s more in all
(bench/results/2026-12-05b/import13/). The indexes are the same; only the time moves."""


class Check(NamedTuple):
    """A check a trigger makes on each new row, made once on every loaded row."""

    table: str
    query: str  # finds a row the trigger would have refused
    reason: str


REPLAYED: dict[str, tuple[str, ...]] = {
    INDEX_TRIGGER: INDEX_REFILL,
    "memories_vector_queue": (
        "INSERT INTO vector_queue (tenant_id, memory_pk) SELECT tenant_id, pk FROM memories",
    ),
}
"""Triggers set aside for the load, by name, and the statements that do for every loaded row
what the trigger does for one: fill SQLite's FTS5 index (`sqlite.INDEX_REFILL`), queue every
memory for embedding (migration 0010). A test compares the result with a row-by-row import."""

CHECKED = {
    "memories_tenant_required": Check(
        "memories",
        "SELECT 1 FROM memories WHERE tenant_id IS NULL LIMIT 1",
        "NOT NULL constraint failed: memories.tenant_id",
    ),
}
"""SQLite triggers that only refuse a row, by name: set aside for the load like `REPLAYED`, and
their check made once after it. Migration 0018's (SQLite cannot add NOT NULL to a column), fired
per row, made the insert of memories a fifth slower (bench/results/2026-12-04/import7/)."""


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
        self._omittable: dict[str, frozenset[str]] = {}

    def write(self, table: sa.Table, rows: list[dict[str, Any]], first_line: int) -> None:
        if not rows:
            return
        omittable = self._nulls_by_default(str(table.name))
        keys, values = tuples(table, rows, first_line, self.dialect, omittable)
        self.write_values(table, keys, values, first_line)

    def _nulls_by_default(self, table: str) -> frozenset[str]:
        """SQLite: the columns of `table` an INSERT may leave out to store null (nullable, no
        default, not the key), as the target's own schema says."""
        if self.dialect.name != "sqlite":
            return frozenset()
        if table not in self._omittable:
            columns = self.conn.exec_driver_sql(
                "SELECT name FROM pragma_table_info(?) "
                'WHERE NOT "notnull" AND dflt_value IS NULL AND pk = 0',
                (table,),
            ).scalars()
            self._omittable[table] = frozenset(columns)
        return self._omittable[table]

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
    """Set indexes, foreign keys and the `REPLAYED` and `CHECKED` triggers aside, yield a loader
    for the empty `tables`, then do the triggers' work once and build everything again. Rows that
    break a constraint then (a key twice, a missing parent, a trigger's check) are refused as
    `TransferError`."""
    checks: list[Check] = []
    if conn.dialect.name == "postgresql":
        restore = _postgres_aside(conn, tables)
    else:
        restore, checks = _sqlite_aside(conn)
    loader = Loader(conn)
    try:
        yield loader
    except BaseException:
        loader.abort()  # a refusal found while a COPY was open: the connection can roll back
        raise
    loader.finish()
    for check in checks:
        if conn.exec_driver_sql(check.query).first() is not None:
            raise TransferError(
                f"The target refused a row of {check.table!r}: {check.reason}; nothing imported",
                {"reason": check.reason, "table": check.table},
            )
    errors = bad_data_errors(conn)
    for statement in restore:
        try:
            conn.exec_driver_sql(statement)
        except errors as exc:
            raise refusal(exc, None) from None
    if conn.dialect.name == "sqlite":
        _check_parents(conn, tables)


def _sqlite_aside(conn: Connection) -> tuple[list[str], list[Check]]:
    """SQLite: drop every named index and the replayed and checked triggers; return what
    restores them, and the checks to make. (A unique constraint's own index stays: SQLite cannot
    drop it.)"""
    conn.exec_driver_sql(f"PRAGMA cache_size = -{SQLITE_CACHE_KIB}")
    conn.exec_driver_sql("PRAGMA defer_foreign_keys = ON")  # until the commit: `_check_parents`
    aside = (*REPLAYED, *CHECKED)
    saved = conn.exec_driver_sql(
        "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND "
        f"(type = 'index' OR (type = 'trigger' AND name IN ({', '.join('?' * len(aside))})))",
        aside,
    ).all()
    for kind, name, _ in saved:
        conn.exec_driver_sql(f'DROP {kind.upper()} "{name}"')
    triggers = [name for kind, name, _ in saved if kind == "trigger"]
    replays = [sql for name in triggers for sql in REPLAYED.get(name, ())]
    checks = [CHECKED[name] for name in triggers if name in CHECKED]
    return [*replays, *SQLITE_INDEX_BUILDS, *(sql for _, _, sql in saved)], checks


def _check_parents(conn: Connection, tables: list[str]) -> None:
    """SQLite: every loaded row's parents are there, whatever the order of the file's lines.
    The foreign keys were deferred for the load, as PostgreSQL's are dropped and added back
    (which checks them then): a child row may come before its parent on both backends, and a
    row whose parent never comes is refused on both, here rather than by the commit."""
    children = conn.exec_driver_sql(
        "SELECT DISTINCT m.name FROM sqlite_master m, pragma_foreign_key_list(m.name) "
        "WHERE m.type = 'table'"
    ).scalars()
    for child in sorted(set(children) & set(tables)):
        missing = conn.exec_driver_sql(f'PRAGMA foreign_key_check("{child}")').first()
        if missing is None:
            continue
        table, parent = str(missing[0]), str(missing[2])
        raise TransferError(
            f"The target refused a row of {table!r}: its parent in {parent!r} is missing; "
            "nothing imported",
            {"table": table, "parent": parent},
        )


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
        *(sql for _, _, raw in triggers for sql in REPLAYED[raw]),
        *(definition for _, definition in indexes),
        *(f"ALTER TABLE {table} ADD CONSTRAINT {name} {spec}" for table, name, spec in keys),
    ]
