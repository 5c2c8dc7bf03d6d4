"""Connections and dialect hooks shared by every SQL store module."""

from __future__ import annotations

import abc
import functools
import logging
import os
import struct
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.dml import Delete, Insert

from mnemos.domain.ids import utcnow
from mnemos.domain.models import ChangedBy, HistoryEvent
from mnemos.domain.queries import Audience
from mnemos.domain.search import SearchQuery
from mnemos.errors import InsufficientStorage, StorageUnavailable
from mnemos.storage import replicas as replication
from mnemos.storage.history_rows import history_row, record
from mnemos.storage.replicas import Mark, Replica, ReplicaFailed, ReplicaSet, ReplicaStatus
from mnemos.storage.schema import (
    ended_sessions,
    memories,
    search_pages,
    server_secrets,
    subject_tenants,
)
from mnemos.storage.search_plan import TermStats
from mnemos.storage.statement_cache import StatementCache

log = logging.getLogger("mnemos")
M = memories.c
DEFAULT_SEARCH_BUDGET_MS = 1000  # as `Settings.search_budget_ms`
_SCORE = struct.Struct("<d")
_RANKED_ROW = 16 + _SCORE.size
EXPIRED_CLEANED = 100  # more than one request's worth: `_remember_until`'s tables shrink


_P = search_pages.c
_TRIM_KEPT = search_pages.delete().where(
    _P.search_id.in_(
        sa.select(_P.search_id)
        .where(_P.owner == sa.bindparam("owner"))
        .order_by(_P.expires_at.desc(), _P.search_id.desc())
        .offset(sa.bindparam("most", type_=sa.Integer()))
        .with_for_update(skip_locked=True)
    )
)
"""A caller's kept answers past its newest `most` go (those another writer is deleting are
skipped, as in `_remember_until`: the bound holds once both commit)."""
EVERY_TENANT = "/* every tenant */"
"""Marks the few statements that read memory-side tables of every tenant (docs/deploying.md,
"Multi-shard queries"); the suite's check of tenant filters lets only these through."""

R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])


def replica_read(method: F) -> F:
    """A read that may run on a replica (PostgreSQL with replicas configured): alone, on one in
    rotation that has the caller's writes; inside a `snapshot()`, on the snapshot's connection.
    When the replica fails it, the read runs again on the primary."""

    @functools.wraps(method)
    def routed(self: SqlBase, *args: Any, **kwargs: Any) -> Any:
        return self._routed(lambda: method(self, *args, **kwargs))

    return cast(F, routed)


@dataclass
class _Pin:
    """The one transaction every read of a `snapshot()` shares (on a replica, or the primary)."""

    conn: Connection
    replica: Replica | None
    stack: ExitStack = field(repr=False)

    def close(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.replica is None:
            self.stack.__exit__(kind, exc, tb)
            return
        with suppress(Exception):  # a read-only transaction: nothing to lose on a dead replica
            self.stack.__exit__(kind, exc, tb)


Keys = dict[uuid.UUID, list[int]]
"""Memory pks by tenant."""
Layouts = set[tuple[uuid.UUID, str]]
"""Parts of the vector search's layout: (tenant, owner key) (`sql_vectors.Layout`)."""

ERASURES_LOCK = "1835363693, 1"
"""The PostgreSQL advisory lock (its two-int form, which never meets the one-bigint keys of
`PostgresStore._lock_owner`) every erasure takes first, shared (erasures do not wait for each
other), and `import --merge` holds alone from before its first read: an erasure waits for a
merge, then erases what it added (review17's finding 3). On SQLite the merge's
`BEGIN IMMEDIATE` holds the one writer already."""


def by_tenant(keys: Iterable[tuple[int, uuid.UUID]]) -> Keys:
    """(pk, tenant) pairs as pks by tenant."""
    found: Keys = {}
    for pk, tenant in keys:
        found.setdefault(tenant, []).append(pk)
    return found


def driver_connection(conn: Connection) -> Any:
    """The DB-API connection (sqlite3 or psycopg) under a checked-out SQLAlchemy connection."""
    raw = conn.connection.driver_connection
    if raw is None:
        raise StorageUnavailable(details={"reason": "connection is closed"})
    return raw


QUEUED = "mnemos_queued"
"""The key, in a connection's `info`, of the flag `SqlBase._note_inserted` sets."""


class SqlBase(abc.ABC):
    """Engines, transactions and the few places where backends differ."""

    def _candidates_in(self, column: sa.Column[Any]) -> sa.ColumnElement[bool]:
        """`column` is one of the keys bound as `candidates` (a list): IN with one placeholder
        a key here; SQLite binds one JSON array, PostgreSQL one array."""
        return column.in_(sa.bindparam("candidates", expanding=True))

    def __init__(
        self,
        read_engine: Engine,
        write_engine: Engine,
        snapshot_engine: Engine | None = None,
        *,
        search_budget_ms: int = DEFAULT_SEARCH_BUDGET_MS,
    ):
        self._search_budget_ms = search_budget_ms
        self._read_engine = read_engine
        self._write_engine = write_engine
        self._snapshot_engine = snapshot_engine or read_engine
        self._statements = StatementCache()  # built statements by query shape
        self._queued_listeners: list[Callable[[], object]] = []  # `on_queued`
        self._pinned = threading.local()  # `.pin`: the transaction of a `snapshot()`, per thread
        self._route = threading.local()  # `.replica`: where this thread's `replica_read` runs
        self._replicas: ReplicaSet | None = None  # set by a backend that has replicas

    # --- dialect hooks ---------------------------------------------------------------------

    def _cuts_pool(self, audience: Audience) -> bool:  # noqa: ARG002
        """Whether `_search_rank` scores only a pool of `audience`'s newest matches when asked
        to (else every match is scored: the pool is a bound on work, not on the answer)."""
        return False

    def _walks_pool(self, conn: Connection, search: SearchQuery) -> bool:  # noqa: ARG002
        """Whether `_search_rank` looks for a pool of `search`'s matches by walking the owner's
        index first (asked only where `_cuts_pool`): a choice of plan, which may read any
        tenant's statistics because the pool's rows are the same either way."""
        return True

    @abc.abstractmethod
    def _search_clause(self, param: sa.BindParameter[Any]) -> sa.ColumnElement[bool]:
        """A condition on `memories` that holds when the row matches the search bound to `param`."""

    @abc.abstractmethod
    def _search_rank(
        self,
        param: sa.BindParameter[Any],
        pool: int | None,
        audience: Audience,
        index: int,
        walk: bool,
    ) -> tuple[
        sa.FromClause, sa.ColumnElement[bool], sa.ColumnElement[float], sa.FromClause | None
    ]:
        """For a relevance order: what to select from (`memories`, joined to the index if the
        backend needs it), the condition that a row matches the search bound to `param`, its
        score there (higher is better), and the pool's rows (None without a pool). With `pool`
        (only where `_cuts_pool`), only the newest `pool` matches of `audience`'s owner (number
        `index` of the query, its values bound as `a{index}_...`) are scored, found by walking
        the owner's index first if `walk` (`_walks_pool`); which rows they are never depends
        on `walk`, nor on any other tenant's memories. The pool's rows, one per memory, are
        counted (fewer than `pool`: it cut nothing)."""

    @abc.abstractmethod
    def _search_value(self, search: SearchQuery, audience: Audience) -> str:
        """What to bind to `_search_clause`'s parameter for `search` within `audience`."""

    @abc.abstractmethod
    def _search_budget(self, conn: Connection) -> AbstractContextManager[None]:
        """Stop a statement run inside this block on `conn` once it has taken longer than
        `self._search_budget_ms`, raising `SearchTooExpensive` instead of its database error."""

    @abc.abstractmethod
    def _term_stats(self, conn: Connection, search: SearchQuery) -> TermStats | None:
        """Estimates of how many memories hold each of `search.parts()`, read cheaply from the
        index's statistics (`search_plan.py`); None when there are none."""

    @abc.abstractmethod
    def _recheck_values(self, search: SearchQuery) -> dict[str, Any]:
        """The parameters of `_recheck_clause` for `search`, each named `rc_...`: their names
        tell the clause's shape apart, their values are the search's terms."""

    @abc.abstractmethod
    def _recheck_clause(self, names: tuple[str, ...]) -> sa.ColumnElement[bool]:
        """A condition on a `memories` row that holds exactly when it matches every term of the
        search whose `_recheck_values` have these names, checked on the row (no index)."""

    def _search_read(self) -> AbstractContextManager[Connection]:
        """A connection for a search (run inside `_search_budget`)."""
        return self._read()

    @abc.abstractmethod
    def _insert_ignore(self, table: sa.Table) -> Insert:
        """An INSERT that does nothing when the primary key already exists."""

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        pin: _Pin | None = getattr(self._pinned, "pin", None)
        if pin is not None:
            with self._guard(), _replica_errors(pin.replica):
                yield pin.conn
            return
        replica: Replica | None = getattr(self._route, "replica", None)
        if replica is not None:
            with self._guard(), _replica_errors(replica), replica.reads.connect() as conn:
                yield conn
            return
        with self._guard(), self._open_read() as conn:
            yield conn

    def _open_read(self) -> AbstractContextManager[Connection]:
        """A connection for one read (a transaction where the backend needs one)."""
        return self._read_engine.connect()

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        if getattr(self._pinned, "pin", None) is not None:
            yield
            return
        with self._guard():
            self._pinned.pin = self._pin(self._choose_replica())
            try:
                yield
            except BaseException as exc:
                self._unpin(type(exc), exc, exc.__traceback__)
                raise
            self._unpin(None, None, None)

    def _unpin(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        pin: _Pin = self._pinned.pin  # the current one: a failed replica's was replaced
        self._pinned.pin = None
        pin.close(kind, exc, tb)

    def _pin(self, replica: Replica | None) -> _Pin:
        """Begin a snapshot's transaction on `replica`, or on the primary if None (or if the
        replica fails to begin one)."""
        stack = ExitStack()
        if replica is not None:
            try:
                with _replica_errors(replica):
                    return _Pin(stack.enter_context(replica.snapshots.begin()), replica, stack)
            except ReplicaFailed as failed:
                failed.replica.fail(failed.reason)
        return _Pin(stack.enter_context(self._snapshot_engine.begin()), None, stack)

    # --- replicas --------------------------------------------------------------------------

    def act_for(self, organization_id: uuid.UUID | None, person_id: uuid.UUID) -> None:
        replication.act_for(replication.tenant_key(organization_id, person_id))

    def replica_status(self) -> list[ReplicaStatus]:
        return self._replicas.status() if self._replicas is not None else []

    def _choose_replica(self) -> Replica | None:
        if self._replicas is None:
            return None
        with self._guard():  # the caller's mark is read on the primary
            return self._replicas.choose(replication.current())

    def _routed(self, run: Callable[[], R]) -> R:
        """Run a `replica_read` where it belongs; on the primary again if a replica fails it."""
        if self._replicas is None or getattr(self._route, "replica", None) is not None:
            return run()  # no replicas, or already routed by an enclosing read
        pin: _Pin | None = getattr(self._pinned, "pin", None)
        if pin is not None:
            if pin.replica is None:
                return run()
            try:
                return run()
            except ReplicaFailed as failed:
                failed.replica.fail(failed.reason)
            # The rest of the snapshot reads the primary: a page and its total may then come
            # from two states, once, when a replica dies in between (rather than a 503).
            pin.close(None, None, None)
            with self._guard():
                self._pinned.pin = self._pin(None)
            return run()
        replica = self._choose_replica()
        if replica is None:
            return run()
        self._route.replica = replica
        try:
            return run()
        except ReplicaFailed as failed:
            failed.replica.fail(failed.reason)
        finally:
            self._route.replica = None
        return run()

    @contextmanager
    def _write(self, *, mark: Mark = True) -> Iterator[Connection]:
        """A write transaction on the primary. With replicas, a committed write then moves its
        tenant's mark (`mark=False`: tables that only the primary reads, written on hot paths,
        or what no reader needs at once; a list: the tenants the block wrote for, which it
        fills, for background work that acts for no caller)."""
        with self._guard(), self._write_engine.connect() as conn:
            self._queued_commit(conn)  # a flag a failed transaction left on the connection
            with conn.begin():
                yield conn
                queued = self._queued_commit(conn)
            if mark is not False and self._replicas is not None:
                self._replicas.written(conn, None if mark is True else mark)
        if queued:
            self._tell_queued()

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except sa.exc.OperationalError as exc:
            reason = str(exc.orig)[:200]
            if (
                "disk is full" in reason
                or "No space left" in reason
                or "could not extend" in reason
            ):
                raise InsufficientStorage(details={"reason": reason}) from exc
            raise StorageUnavailable(details={"reason": reason}) from exc

    # --- the one delete path of memories ----------------------------------------------------

    def _note_inserted(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
        """What every insert path of memories does beside the insert, in its transaction: note
        the subjects' tenants, and that the transaction queued memories for embedding (a trigger
        queues each inserted memory: migration 0010), for `_queued_commit`."""
        self._note_subjects(conn, rows)
        conn.info[QUEUED] = True

    def _queued_commit(self, conn: Connection) -> bool:
        """Whether the write transaction on `conn` queued memories (read once, before it ends)."""
        return bool(conn.info.pop(QUEUED, False))

    def _tell_queued(self) -> None:
        """After a commit that queued memories: this process's listeners (its embedding worker
        wakes up at once instead of at its next look at the queue)."""
        for listener in self._queued_listeners:
            listener()

    def on_queued(self, listener: Callable[[], object]) -> None:
        self._queued_listeners.append(listener)

    def off_queued(self, listener: Callable[[], object]) -> None:
        # A new list, not an edit in place: a commit may be calling the listeners meanwhile.
        self._queued_listeners = [known for known in self._queued_listeners if known != listener]

    def _note_subjects(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
        """Record which tenants hold memories about which subjects (`subject_tenants`), for
        inserted memory rows, in the caller's transaction."""
        pairs = {(r["subject_id"], r["tenant_id"]) for r in rows if r["subject_id"] is not None}
        if pairs:
            values = [{"subject_id": s, "tenant_id": t} for s, t in sorted(pairs)]
            conn.execute(self._insert_ignore(subject_tenants), values)

    def _delete_memories(
        self, conn: Connection, where: sa.ColumnElement[bool], by: ChangedBy | None = None
    ) -> int:
        """Delete the memories matching `where` (which names their tenants) inside the
        caller's transaction; how many.
        With `by`, each gets a `deleted` history row (an erasure passes none: it deletes their
        history too).

        Every deletion of memories (one, a batch, an agent's, a Tuya key's, an erasure) comes
        here, so an index kept beside `memories` is cleaned up in one place: SQLite's FTS5 by
        its trigger, PostgreSQL's tsvector with the row, the vector queue and vectors by set
        just after (`_forget_vectors`); a new index adds its cleanup here."""
        statement = memories.delete().where(where)
        owners: Layouts = set()
        if by is None:  # an erasure: no history is kept
            count, keys, owners = self._delete_counted(conn, statement)
        else:
            gone = conn.execute(statement.returning(M.pk, M.tenant_id, M.id, M.subject_id)).all()
            now = utcnow()
            event = HistoryEvent.DELETED
            record(conn, (history_row(t, i, s, event, by, now) for _, t, i, s in gone))
            count, keys = len(gone), by_tenant((row[0], row[1]) for row in gone)
        self._forget_vectors(conn, keys)
        self._keys_freed(conn, keys)
        self._purge_vectors(conn, owners)  # an erasure leaves no sealed copy of a vector
        return count

    @abc.abstractmethod
    def _delete_counted(self, conn: Connection, statement: Delete) -> tuple[int, Keys, Layouts]:
        """Run `statement`, a DELETE of memories, for an erasure: how many it deleted, the keys
        `_forget_vectors` needs (the deleted memories' pks by tenant; none when the vector rows
        go with their memories), and the layout owners that may hold a sealed copy of a deleted
        memory's vector (`_purge_vectors` rewrites their chunks). The owners are those of what
        the DELETE deleted, not read before it: on PostgreSQL the embedding worker may seal a
        chunk of a memory between such a read and the DELETE (review17's finding 9)."""

    def _begin_erasure(self, conn: Connection) -> None:  # noqa: ARG002
        """First thing in an erasure's transaction (a dialect hook): PostgreSQL waits for a
        merge (`ERASURES_LOCK`) and lifts the statement timeout (the rights threads bound an
        erasure, and a person with more memories than the timeout allows must be erasable)."""
        return None

    @abc.abstractmethod
    def _forget_vectors(self, conn: Connection, keys: Keys) -> None:
        """Delete the queue entries and vectors of deleted memories (`keys`: pks by tenant), by
        set, after them. On PostgreSQL no foreign key cascades them (migration 0013: a cascade
        runs once per row), and a vector saved by an embedder that locked the memory before the
        delete is committed by now (`save_vectors`), so it goes too; on SQLite (one writer)
        their foreign keys cascade. `vector_tail` follows `memory_vectors` by its cascade."""

    def _keys_freed(self, conn: Connection, keys: Keys) -> None:  # noqa: ARG002
        """After deleting the memories of `keys` (pks by tenant), in the same transaction: a
        backend that may give a deleted pk to a later memory (SQLite's rowid) purges the sealed
        vector copies of those pks first, or the sweep would take them for the new memory's
        and keep the deleted memory's vector for good. PostgreSQL's sequence never does."""
        return None

    def _vector_owners(
        self,
        conn: Connection,  # noqa: ARG002
        where: sa.ColumnElement[bool],  # noqa: ARG002
    ) -> Layouts:
        """The vector index's owners holding a vector of a memory matching `where` (read before
        SQLite's erasure deletes them: one writer); the vector store overrides this hook."""
        return set()

    def _purge_vectors(self, conn: Connection, owners: Layouts) -> None:  # noqa: ARG002
        """Rewrite `owners`' sealed vector chunks without the vectors of deleted memories, in
        the caller's transaction (an erasure leaves no copy behind); the vector store's hook."""
        return None

    # --- lifecycle -------------------------------------------------------------------------

    def ping(self) -> None:
        with self._read() as conn:
            conn.execute(sa.text("SELECT 1"))

    def close(self) -> None:
        if self._replicas is not None:
            self._replicas.close()
        self._read_engine.dispose()
        self._write_engine.dispose()

    def secret(self, name: str) -> bytes:
        with self._write(mark=False) as conn:
            conn.execute(
                self._insert_ignore(server_secrets).values(name=name, value=os.urandom(32))
            )
            value = conn.execute(
                sa.select(server_secrets.c.value).where(server_secrets.c.name == name)
            ).scalar_one()
        return bytes(value)

    def _remember_until(
        self,
        table: sa.Table,
        key: str,
        expires_at: datetime,
        *,
        write: Callable[[], AbstractContextManager[Connection]] | None = None,
        then: tuple[sa.Executable, dict[str, Any]] | None = None,
        **values: Any,
    ) -> bool:
        """Keep `key` (the primary key of `table`, which has an `expires_at`; `values` fill its
        other columns) until `expires_at`; False if it is already kept. A few expired rows go
        first, skipping those another writer is deleting (PostgreSQL): concurrent callers
        neither wait for nor deadlock on each other, and the table shrinks under any load.
        `then` (a statement and its parameters) runs last in the same transaction. Only the
        primary reads these tables. `write` opens the transaction (default: a durable one)."""
        (column,) = table.primary_key.columns
        statements = self._statements.get(("remember", table.name))
        if statements is None:  # built once: a search's kept answer is written per request
            expired = (
                sa.select(column)
                .where(table.c.expires_at < sa.bindparam("now"))
                .limit(EXPIRED_CLEANED)
                .with_for_update(skip_locked=True)
            )
            statements = (
                table.delete().where(column.in_(expired)),
                self._insert_ignore(table).returning(column),
            )
            self._statements.put(("remember", table.name), statements)
        clean, insert = statements
        with write() if write is not None else self._write(mark=False) as conn:
            conn.execute(clean, {"now": utcnow()})
            row = {column.name: key, "expires_at": expires_at, **values}
            inserted = conn.execute(insert, row).first()
            if then is not None:
                conn.execute(*then)
        return inserted is not None

    def end_session(self, session_id: str, expires_at: datetime) -> None:
        self._remember_until(ended_sessions, session_id, expires_at)

    def session_ended(self, session_id: str) -> bool:
        # On the primary, never a replica: a sign-out must hold at once in every process.
        query = sa.select(ended_sessions.c.session_id).where(
            ended_sessions.c.session_id == session_id
        )
        with self._guard(), self._open_read() as conn:
            return conn.execute(query).first() is not None

    def keep_search(
        self,
        search_id: str,
        ranked: Sequence[tuple[uuid.UUID, float]],
        expires_at: datetime,
        owner: str,
        most: int,
    ) -> None:
        packed = b"".join(memory_id.bytes + _SCORE.pack(score) for memory_id, score in ranked)
        with _cache_failures("kept"):
            self._keep(search_id, packed, expires_at, owner, most)

    def _keep(
        self, search_id: str, packed: bytes, expires_at: datetime, owner: str, most: int
    ) -> None:
        """Keep a search's packed answer in `search_pages`: a few expired answers cleaned, this
        one kept (unless already), and the owner's answers past its newest `most` dropped, in
        one lazily written transaction (a dialect hook: PostgreSQL does it in one statement)."""
        self._remember_until(
            search_pages,
            search_id,
            expires_at,
            write=functools.partial(self._kept, write=True),
            then=(_TRIM_KEPT, {"owner": owner, "most": most}),
            ranked=packed,
            owner=owner,
        )

    def _lazy_write(self, *, mark: Mark = False) -> AbstractContextManager[Connection]:
        """A write transaction whose commit may return before it reaches the disk: a crash may
        lose it, never corrupt anything, nor keep a later durable commit without it (a dialect
        hook: PostgreSQL's asynchronous commit, SQLite's `synchronous=NORMAL`). For what a
        crash may lose: caches, and the embedding worker's work (it is done again). `mark`:
        as `_write`'s (replicas' readers must see it)."""
        return self._write(mark=mark)

    def _kept(self, *, write: bool) -> AbstractContextManager[Connection]:
        """A transaction where the kept answers of searches live (`search_pages`): written
        lazily (a kept answer is a cache: lost in a crash, its cursor says "expired"), read on
        the primary, never a replica (the first page wrote it a moment ago). A dialect hook:
        SQLite keeps them in a file of their own (`sqlite_kept.py`)."""
        return self._lazy_write() if write else self._open_read()

    def kept_search(self, search_id: str) -> list[tuple[uuid.UUID, float]] | None:
        query = sa.select(search_pages.c.ranked).where(
            search_pages.c.search_id == search_id, search_pages.c.expires_at >= utcnow()
        )
        packed = None
        with _cache_failures("read"), self._guard(), self._kept(write=False) as conn:
            packed = conn.execute(query).scalar()
        if packed is None:
            return None
        data = bytes(packed)
        return [
            (uuid.UUID(bytes=data[at : at + 16]), _SCORE.unpack_from(data, at + 16)[0])
            for at in range(0, len(data), _RANKED_ROW)
        ]

    # --- accounts --------------------------------------------------------------------------


@contextmanager
def _cache_failures(doing: str) -> Iterator[None]:
    """A kept search answer that cannot be written or read (SQLite's `<database>.searches`
    unopenable, its disk full, the database busy) is as one lost in a crash: logged, and the
    search goes on (`SearchPages.keep_search`)."""
    try:
        yield
    except (StorageUnavailable, InsufficientStorage) as exc:
        log.warning("a search's kept answer could not be %s: %s", doing, exc.details)


@contextmanager
def _replica_errors(replica: Replica | None) -> Iterator[None]:
    """A database error on a replica becomes `ReplicaFailed` (to be read again on the primary),
    except a statement stopped by its time limit, which would fail there too."""
    if replica is None:
        yield
        return
    try:
        yield
    except sa.exc.DBAPIError as exc:
        if _timed_out(exc):
            raise
        raise ReplicaFailed(replica, str(exc.orig)[:200]) from exc


def _timed_out(exc: sa.exc.DBAPIError) -> bool:
    return getattr(exc.orig, "sqlstate", None) == "57014"  # query_canceled: statement_timeout
