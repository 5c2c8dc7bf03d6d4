"""Connections and dialect hooks shared by every SQL store module."""

from __future__ import annotations

import abc
import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.dml import Insert

from mnemos.domain.ids import utcnow
from mnemos.domain.models import ChangedBy, HistoryEvent
from mnemos.domain.queries import Audience
from mnemos.domain.search import SearchQuery
from mnemos.errors import InsufficientStorage, StorageUnavailable
from mnemos.storage.history_rows import history_row, record
from mnemos.storage.schema import memories, server_secrets
from mnemos.storage.search_plan import TermStats

DEFAULT_SEARCH_BUDGET_MS = 1000  # as `Settings.search_budget_ms`


def driver_connection(conn: Connection) -> Any:
    """The DB-API connection (sqlite3 or psycopg) under a checked-out SQLAlchemy connection."""
    raw = conn.connection.driver_connection
    if raw is None:
        raise StorageUnavailable(details={"reason": "connection is closed"})
    return raw


class SqlBase(abc.ABC):
    """Engines, transactions and the few places where backends differ."""

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
        self._statements: dict[tuple[Any, ...], Any] = {}  # list SELECTs by query shape
        self._pinned = threading.local()  # the read connection of a `snapshot()`, per thread

    # --- dialect hooks ---------------------------------------------------------------------

    @abc.abstractmethod
    def _search_clause(self, param: sa.BindParameter[Any]) -> sa.ColumnElement[bool]:
        """A condition on `memories` that holds when the row matches the search bound to `param`."""

    @abc.abstractmethod
    def _search_rank(
        self, param: sa.BindParameter[Any]
    ) -> tuple[sa.FromClause, sa.ColumnElement[bool], sa.ColumnElement[float]]:
        """For a relevance order: what to select from (`memories`, joined to the index if the
        backend needs it), the condition that a row matches the search bound to `param`, and
        its score there (higher is better)."""

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
        pinned: Connection | None = getattr(self._pinned, "conn", None)
        if pinned is not None:
            with self._guard():
                yield pinned
            return
        with self._guard(), self._open_read() as conn:
            yield conn

    def _open_read(self) -> AbstractContextManager[Connection]:
        """A connection for one read (a transaction where the backend needs one)."""
        return self._read_engine.connect()

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        if getattr(self._pinned, "conn", None) is not None:
            yield
            return
        with self._guard(), self._snapshot_engine.begin() as conn:
            self._pinned.conn = conn
            try:
                yield
            finally:
                self._pinned.conn = None

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        with self._guard(), self._write_engine.begin() as conn:
            yield conn

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

    def _delete_memories(
        self, conn: Connection, where: sa.ColumnElement[bool], by: ChangedBy | None = None
    ) -> int:
        """Delete the memories matching `where` inside the caller's transaction; how many.
        With `by`, each gets a `deleted` history row (an erasure passes none: it deletes their
        history too).

        Every deletion of memories (one, a batch, an agent's, a Tuya key's, an erasure) comes
        here, so an index kept beside `memories` is cleaned up in one place: SQLite's FTS5 by
        its trigger, PostgreSQL's tsvector with the row; a new index adds its cleanup here (or
        a foreign key with ON DELETE CASCADE)."""
        if by is None:  # an erasure: no history is kept
            return int(conn.execute(memories.delete().where(where)).rowcount)
        statement = memories.delete().where(where).returning(memories.c.id, memories.c.subject_id)
        gone = conn.execute(statement).all()
        now = utcnow()
        record(conn, (history_row(i, s, HistoryEvent.DELETED, by, now) for i, s in gone))
        return len(gone)

    # --- lifecycle -------------------------------------------------------------------------

    def ping(self) -> None:
        with self._read() as conn:
            conn.execute(sa.text("SELECT 1"))

    def close(self) -> None:
        self._read_engine.dispose()
        self._write_engine.dispose()

    def secret(self, name: str) -> bytes:
        with self._write() as conn:
            conn.execute(
                self._insert_ignore(server_secrets).values(name=name, value=os.urandom(32))
            )
            value = conn.execute(
                sa.select(server_secrets.c.value).where(server_secrets.c.name == name)
            ).scalar_one()
        return bytes(value)

    # --- accounts --------------------------------------------------------------------------
