"""`mnemos import`: an export file into a database, in one transaction (`transfer.py` has the
format). Into an empty database rows take the fast path of `transfer_bulk.py` (the driver's
executemany or COPY, indexes and derived data built once at the end); with `--merge` they go
through SQLAlchemy, and rows whose key exists are skipped and counted.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from mnemos.domain.models import HistoryEvent
from mnemos.domain.search import recut
from mnemos.domain.tenants import UNKNOWN
from mnemos.storage.schema import MEMORY_SIDE, erasures, memories, memory_history, metadata
from mnemos.storage.sql_base import ERASURES_LOCK, EVERY_TENANT
from mnemos.storage.transfer import (
    BATCH_ROWS,
    MERGE_KEYS,
    NOT_MERGED,
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
from mnemos.storage.transfer_bulk import BATCH_ROWS as BULK_BATCH_ROWS
from mnemos.storage.transfer_bulk import Loader, bad_data_errors, bulk_load, refusal
from mnemos.storage.transfer_values import tuples


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


PROGRESS_LINES = 1000  # lines read between two progress reports


def _records(
    lines: Iterable[bytes], progress: Progress
) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(line number, table, row) for every row line, until the trailer, whose counts must
    match. A line that is not an object, or a row with no columns, is refused here, before
    either way of loading sees it."""
    counted: dict[str, int] = {}
    unreported = 0
    for number, line in enumerate(lines, start=2):
        unreported += len(line)
        if number % PROGRESS_LINES == 0:
            progress(unreported)
            unreported = 0
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise TransferError(
                f"Line {number} is not JSON: the file is cut short or damaged; nothing imported",
                {"line": number},
            ) from None
        if not isinstance(record, dict):
            raise TransferError(f"Line {number} is not a row record", {"line": number})
        if record.get("end") is True:
            progress(unreported)
            expected = record.get("rows")
            listed = {k: v for k, v in expected.items() if v} if isinstance(expected, dict) else {}
            if listed != counted:
                raise TransferError(
                    "The row counts in the trailer differ from the rows read; nothing imported"
                )
            return
        table, row = record.get("t"), record.get("r")
        if not isinstance(table, str) or not isinstance(row, dict) or not row:
            raise TransferError(f"Line {number} is not a row record", {"line": number})
        counted[table] = counted.get(table, 0) + 1
        yield number, table, row
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
        with engine.connect() as conn, _erasures_held(conn, merge), conn.begin():
            if not merge and (occupied := occupied_tables(conn)):
                raise TransferError(
                    "The target database is not empty: import into a new one, or pass --merge",
                    {"tables": occupied},
                )
            if merge:
                held = held_before(conn)
                targets, old = _load(conn, stream, summary, progress, None, held)
            else:
                names = [str(table.name) for table in exported_tables()]
                with bulk_load(conn, names) as loader, _collector_paused():
                    targets, old = _load(conn, stream, summary, progress, loader, Held())
            _after_import(conn, targets.values(), old)
    finally:
        engine.dispose()
    return summary


@contextmanager
def _erasures_held(conn: Connection, merge: bool) -> Iterator[None]:
    """A merge into PostgreSQL holds `ERASURES_LOCK` from before its transaction's snapshot
    (a session lock, taken and committed before it): an erasure the server runs meanwhile waits
    for the merge, then erases what it added; one committed before is in the merge's snapshot
    (`held_before`). Taken inside the transaction, the lock's wait would come after the
    snapshot, which would miss an erasure committed during that wait (review17's finding 3).
    SQLite's merge holds the one writer from `BEGIN IMMEDIATE`."""
    if not merge or conn.dialect.name != "postgresql":
        yield
        return
    conn.exec_driver_sql(f"SELECT pg_advisory_lock({ERASURES_LOCK})")
    conn.commit()
    try:
        yield
    finally:
        with suppress(sa.exc.DBAPIError):  # a connection lost has released it
            conn.exec_driver_sql(f"SELECT pg_advisory_unlock({ERASURES_LOCK})")
            conn.commit()


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's garbage collector off while rows stream in: the load allocates millions of
    objects but keeps only a batch alive, so the collector's passes find nothing (about a fifth
    of the import's time on SQLite)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _load(
    conn: Connection,
    stream: Iterator[bytes],
    summary: Summary,
    progress: Progress,
    loader: Loader | None,
    held: Held,
) -> tuple[dict[str, _Target], bool]:
    """Every row of the file into its table, a batch at a time: through `loader` into an empty
    database, else merged (`loader` None; `held`: what the target held before, which the file's
    new rows may not belong to). True with them if a row came without its tenant (a file from
    before revision 0018)."""
    targets: dict[str, _Target] = {}
    batch: list[dict[str, Any]] = []
    current: str | None = None
    first = 0
    old = False
    size = BATCH_ROWS if loader is None else BULK_BATCH_ROWS
    for number, name, row in _records(stream, progress):
        if name in MEMORY_SIDE and "tenant_id" not in row:  # a file from before revision 0018
            row["tenant_id"] = UNNAMED
            old = True
        if name == "memories" and isinstance(text := row.get("search_text"), str):
            row["search_text"] = recut(text)  # a file from before revision 0025 (long words)
        if name != current or len(batch) >= size:
            if current is not None:
                _flush(conn, targets[current], batch, first, summary, loader, held)
            if loader is not None and name != current:
                loader.finish()  # the table's last rows are in (the next may replace rows)
            if name not in targets:
                targets[name] = _target(conn, name, loader is None)
            current, batch, first = name, [], number
        batch.append(row)
    if current is not None:
        _flush(conn, targets[current], batch, first, summary, loader, held)
    return targets, old


def _count(conn: Connection, table: sa.Table) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


def _flush(
    conn: Connection,
    target: _Target,
    batch: list[dict[str, Any]],
    first_line: int,
    summary: Summary,
    loader: Loader | None,
    held: Held,
) -> None:
    if not batch:
        return
    name = str(target.table.name)
    if loader is not None:  # which checks the columns itself
        loader.write(target.table, batch, first_line)
        summary.rows[name] = summary.rows.get(name, 0) + len(batch)
        return
    unknown = set().union(*(row.keys() for row in batch)) - set(target.table.columns.keys())
    if unknown:
        raise TransferError(
            f"Table {name!r} in the file has columns this Mnemos does not know: upgrade Mnemos",
            {"table": name, "columns": sorted(unknown)},
        )
    # The values are checked as the fast path checks them (the same refusals, naming the line),
    # and what the database refuses is the import's refusal too.
    tuples(target.table, batch, first_line, conn.dialect)
    if name in NOT_MERGED:
        summary.skipped[name] = summary.skipped.get(name, 0) + len(batch)
        summary.rows.setdefault(name, 0)
        return
    rows = target.rows(batch)
    _refuse_grafts(conn, target.table, rows, first_line, held)
    rows, erased = _not_erased(target.table, rows, held)
    summary.erased[name] = summary.erased.get(name, 0) + erased
    before = _count(conn, target.table)
    rows = _not_held(conn, target.table, rows, held)
    if rows:
        try:
            conn.execute(target.statement, rows)
        except bad_data_errors(conn) as exc:
            raise refusal(exc, name) from None
    written = _count(conn, target.table) - before
    if written < len(rows):
        _refuse_clashes(conn, target.table, rows, first_line)
    if name == "memories":
        held.taken.update(row["id"] for row in rows)
    summary.skipped[name] = summary.skipped.get(name, 0) + len(batch) - written
    summary.rows[name] = summary.rows.get(name, 0) + written


def _refuse_clashes(
    conn: Connection, table: sa.Table, rows: list[dict[str, Any]], first_line: int
) -> None:
    """With --merge, a row is skipped because the target holds its key; one the target does
    not hold after the batch went in was skipped for clashing with another row on some other
    unique column (a person's email that is another person's there): refused, naming them,
    instead of going on without it (the rows that point at it would fail on their foreign
    key, a refusal that names neither)."""
    # A row's key: the natural one where the target numbers the primary key itself.
    key = MERGE_KEYS.get(str(table.name)) or [column.name for column in table.primary_key.columns]
    unique = sorted(
        {
            column.name
            for constraint in table.constraints
            if isinstance(constraint, sa.UniqueConstraint)
            for column in constraint.columns
        }
        | {column.name for index in table.indexes if index.unique for column in index.columns}
        | {column.name for column in table.columns if column.unique}
    )
    if not unique or not all(name in rows[0] for name in key):
        return
    held = _held_keys(conn, table, tuple(key), rows)
    for offset, row in enumerate(rows):
        if tuple(row[name] for name in key) not in held:
            raise TransferError(
                f"Line {first_line + offset}: with --merge this {table.name} row is new but "
                f"another row of the target has the same {' or '.join(unique)}; nothing imported",
                {"line": first_line + offset, "table": str(table.name), "columns": unique},
            )


GRAFTS: dict[str, tuple[tuple[str, ...], str, tuple[str, ...]]] = {
    "users": (("id",), "organization_id", ("organizations",)),
    "agents": (("id",), "owner_id", ("users",)),
    "api_keys": (("key_hash",), "principal_id", ("users", "agents")),
    "chat_rooms": (("id",), "owner_id", ("users", "agents")),
    "chat_participants": (("chat_room_id", "participant_id"), "chat_room_id", ("chat_rooms",)),
    "tuya_projects": (("client_id",), "organization_id", ("organizations",)),
    "tuya_roles": (("organization_id", "role_id"), "organization_id", ("organizations",)),
}
"""With --merge, a new row of these tables (its own key, the column naming what it belongs
to, the tables that could hold that) must not belong to anything the target already held: a
merge never grants access to what the target held. A file could otherwise give its author a
key of a person the target holds, an agent or a member in one of its organizations, a seat in
one of its rooms, or a Tuya project or role there (`_refuse_grafts`). Memories may still be
merged into the target's tenants (a newer export of the same organization brings its new
memories): they grant nobody access."""


@dataclass
class Held:
    """What the target held before a merge, read before the first row goes in."""

    ids: dict[str, set[Any]] = field(default_factory=dict)
    """The ids of the tables rows can belong to (`GRAFTS`)."""
    erased: dict[Any, datetime] = field(default_factory=dict)
    """Each person the target erased, with the time of their last erasure."""
    taken: set[Any] = field(default_factory=set)
    """The memories whose history rows this merge takes: those it added, and those the target
    never held. A memory it passed over (the target holds it, deleted it, or erased its
    person) takes none (a merge adds what is new, it never changes what the target holds or
    brings back what it removed): `_new_memories_history` tells them from the target itself."""


def held_before(conn: Connection) -> Held:
    """What the target holds that a merge may not add to or bring back."""
    names = {name for _, _, parents in GRAFTS.values() for name in parents}
    E = erasures.c
    return Held(
        ids={
            name: set(conn.execute(sa.select(metadata.tables[name].c.id)).scalars())
            for name in sorted(names)
        },
        erased=dict(
            conn.execute(sa.select(E.subject_id, sa.func.max(E.at)).group_by(E.subject_id)).all()
        ),
    )


WRITTEN_AT = {"memories": "inserted_at", "memory_history": "at"}
"""When a row about a person was written, for the tables an erasure empties of it."""


def _not_erased(
    table: sa.Table, rows: list[dict[str, Any]], held: Held
) -> tuple[list[dict[str, Any]], int]:
    """With --merge, the rows that are not about a person the target erased after they were
    written (a memory stored before the erasure, a change made before it): erased there, they
    never come back through a merge of an older file. With how many were left out."""
    name = str(table.name)
    when = WRITTEN_AT.get(name)
    if when is None or not held.erased:
        return rows, 0
    kept = []
    for row in rows:
        erased_at = held.erased.get(row["subject_id"])
        if erased_at is not None and row[when] <= erased_at:
            continue
        kept.append(row)
    return kept, len(rows) - len(kept)


def _refuse_grafts(
    conn: Connection, table: sa.Table, rows: list[dict[str, Any]], first_line: int, held: Held
) -> None:
    """With --merge: refuse a batch (its rows decoded) holding a new row (its own key not held)
    that belongs to a row the target held before this import (`GRAFTS`)."""
    graft = GRAFTS.get(str(table.name))
    if graft is None:
        return
    own, parent, parents = graft
    before = set().union(*(held.ids[name] for name in parents))
    suspects = [(offset, row) for offset, row in enumerate(rows) if row.get(parent) in before]
    if not suspects:
        return
    kept = _held_keys(conn, table, own, [row for _, row in suspects])
    for offset, row in suspects:
        if tuple(row[name] for name in own) not in kept:
            raise TransferError(
                f"Line {first_line + offset}: with --merge a new {table.name} row may not "
                f"belong to what the target already held ({parent} {row.get(parent)}); "
                "nothing imported",
                {"line": first_line + offset, "table": str(table.name), "column": parent},
            )


def _held_keys(
    conn: Connection, table: sa.Table, names: tuple[str, ...], rows: list[dict[str, Any]]
) -> set[tuple[Any, ...]]:
    """The values of the columns `names` that the target holds among `rows`' own (looked up
    by the first of them)."""
    columns = [table.c[name] for name in names]
    firsts = {row[names[0]] for row in rows}
    return set(map(tuple, conn.execute(sa.select(*columns).where(columns[0].in_(firsts)))))


def _not_held(
    conn: Connection, table: sa.Table, rows: list[dict[str, Any]], held: Held
) -> list[dict[str, Any]]:
    """With --merge, the rows of a table whose key the target numbers itself (`MERGE_KEYS`)
    that the target does not already hold (or, for a memory, deleted) by their natural key;
    the history rows of memories this merge did not add only as `_new_memories_history` says."""
    name = str(table.name)
    natural = MERGE_KEYS.get(name)
    if name == "memory_history":
        rows = _new_memories_history(conn, rows, held)
    if natural is None or not rows:
        return rows
    there = _held_keys(conn, table, natural, rows)
    if name == "memories":  # a memory the target deleted is never brought back
        there |= {(memory_id,) for memory_id in _deleted(conn, [row["id"] for row in rows])}
    return [row for row in rows if tuple(row[column] for column in natural) not in there]


def _deleted(conn: Connection, memory_ids: list[Any]) -> set[Any]:
    """Those of `memory_ids` whose deletion the target's history records."""
    H = memory_history.c
    deleted = sa.select(H.memory_id).where(
        H.memory_id.in_(memory_ids), H.event == HistoryEvent.DELETED.value
    )
    return set(conn.execute(deleted).scalars())


def _new_memories_history(
    conn: Connection, rows: list[dict[str, Any]], held: Held
) -> list[dict[str, Any]]:
    """The history rows of memories this merge added, or that the target never held: none of
    one the target holds or held from before (its row, or its history: a change the target's
    row did not get, such as the deletion of a memory the file no longer has, or a second
    deletion of one the target deleted), nor of one about a person the target erased unless
    this merge added it (an erased person's old memories leave nothing behind). A memory whose
    history is taken takes its later rows too (`Held.taken`)."""
    ids = {row["memory_id"] for row in rows} - held.taken
    if not ids:
        return rows
    M, H = memories.c, memory_history.c
    before = set(conn.execute(sa.select(M.id).where(M.id.in_(ids))).scalars())
    before |= set(conn.execute(sa.select(H.memory_id).where(H.memory_id.in_(ids))).scalars())
    kept = []
    for row in rows:
        memory_id = row["memory_id"]
        if memory_id in held.taken:
            kept.append(row)
        elif memory_id not in before and row["subject_id"] not in held.erased:
            held.taken.add(memory_id)  # never held there: all of its history is new
            kept.append(row)
    return kept


UNNAMED = str(UNKNOWN)
"""The tenant a row of a file written before tenants (revision 0018) is loaded with, until
`_name_tenants` names the right one."""
_AGENT_TENANT = (
    "(SELECT COALESCE(u.organization_id, u.id) FROM agents a JOIN users u ON u.id = a.owner_id "
    "WHERE a.id = {agent})"
)
TENANTS_OF_OLD_ROWS = (
    "UPDATE memories SET tenant_id = COALESCE(organization_id, "
    + _AGENT_TENANT.format(agent="memories.source_agent_id")
    + ", :unknown) WHERE tenant_id = :unknown",
    "UPDATE memory_history SET tenant_id = COALESCE((SELECT m.tenant_id FROM memories m "
    "WHERE m.id = memory_history.memory_id), :unknown) WHERE tenant_id = :unknown",
    "UPDATE erasures SET tenant_id = subject_id WHERE tenant_id = :unknown",
)
"""The rule of `domain/tenants.py` in SQL, as migration 0018 applies it to rows that held no
tenant (idempotency keys are never exported)."""
SUBJECT_TENANTS = (
    "INSERT INTO subject_tenants (subject_id, tenant_id) SELECT subject_id, tenant_id FROM "
    "(SELECT subject_id, tenant_id FROM memories WHERE subject_id IS NOT NULL UNION "
    "SELECT subject_id, tenant_id FROM memory_history WHERE subject_id IS NOT NULL) found "
    "WHERE NOT EXISTS (SELECT 1 FROM subject_tenants t WHERE t.subject_id = found.subject_id "
    "AND t.tenant_id = found.tenant_id)"
)
"""Which tenants hold memories about whom, for what the file brought (a file from before
revision 0018 carries no `subject_tenants`)."""


def _name_tenants(conn: Connection) -> None:
    unknown = sa.bindparam("unknown", UNKNOWN, type_=sa.Uuid())
    for statement in TENANTS_OF_OLD_ROWS:
        conn.execute(sa.text(statement).bindparams(unknown))
    conn.execute(sa.text(SUBJECT_TENANTS))


MISFILED = (
    f"SELECT {EVERY_TENANT} id FROM memories "
    "WHERE organization_id IS NOT NULL AND tenant_id <> organization_id LIMIT 1"
)
"""An organization's memory filed under another tenant (`domain/tenants.py`: an organization's
memories are its own tenant's); a person's are the person's or their agents' organization's,
which a row alone does not say."""


def _check_tenants(conn: Connection) -> None:
    """Refuse a file that files a memory under a tenant the rule does not give it: every read
    is scoped by tenant, so such a row would be invisible to its organization and within reach
    of another's requests."""
    misfiled = conn.execute(sa.text(MISFILED)).scalar()
    if misfiled is not None:
        raise TransferError(
            "A memory of an organization is filed under another tenant; nothing imported",
            {"table": "memories", "id": str(misfiled)},
        )


def _after_import(conn: Connection, targets: Iterable[_Target], old: bool) -> None:
    """The tenants of rows from a file written before them (`old`: a row came without one); on
    PostgreSQL, each serial key's sequence moved past the rows the file brought."""
    targets = list(targets)
    if old:
        _name_tenants(conn)
    _check_tenants(conn)
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
