"""SQLite: the kept answers of searches in a file of their own, beside the database.

A search with more than one page keeps the rest of its answer (`search_pages`,
`domain/recall.py`): one write per search. In the database's file that write cost the reads
after it: a connection that sees another connection's commit at the start of its next read
transaction drops its whole page cache (WAL mode), so each search's keep made the next
request's authentication, vector reads and page reads fetch and parse their pages again
(docs/decisions.md, "SQLite keeps searches' answers in a file of their own": about 3 ms of a
semantic search at 100,000 memories). Written to `<database>.searches`,
they leave the database's pages cached, and a search no longer waits for the database's one
writer.

A kept answer is a cache (lost in a crash, its cursor says "expired"): the file needs no backup
and no migration (its one table, `search_pages` as in the schema, is created when a process
first uses it), and it commits without the fsync (`synchronous=NORMAL` in WAL mode: a crash may
lose the last answers, never corrupt the file). Processes share it as they share the database:
a process writes on one connection (its threads take turns), other processes wait on
`busy_timeout`.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from mnemos.storage.schema import search_pages
from mnemos.storage.sqlite_engine import sqlite_engine

SUFFIX = ".searches"
"""The kept answers' file: the database's path and this."""


def _engine(path: str, *, pool_size: int, begin: str, busy_timeout_ms: int) -> Engine:
    return sqlite_engine(
        f"sqlite:///{path}",
        pool_size=pool_size,
        begin=begin,
        busy_timeout_ms=busy_timeout_ms,
        pragmas=("synchronous=NORMAL",),
    )


class KeptFile:
    """The file of a SQLite database's kept search answers, opened at its first use."""

    def __init__(self, database_path: str, busy_timeout_ms: int):
        self.path = database_path + SUFFIX
        self._busy_timeout_ms = busy_timeout_ms
        self._lock = threading.Lock()
        self._engines: tuple[Engine, Engine] | None = None

    def write(self) -> AbstractContextManager[Connection]:
        """A write transaction (`BEGIN IMMEDIATE`) on the process's one writing connection."""
        return self._opened()[0].begin()

    def read(self) -> AbstractContextManager[Connection]:
        """A read transaction."""
        return self._opened()[1].begin()

    def close(self) -> None:
        with self._lock:
            if self._engines is not None:
                for engine in self._engines:
                    engine.dispose()
                self._engines = None

    def _opened(self) -> tuple[Engine, Engine]:
        with self._lock:
            if self._engines is None:
                timeout = self._busy_timeout_ms
                writer = _engine(
                    self.path, pool_size=1, begin="BEGIN IMMEDIATE", busy_timeout_ms=timeout
                )
                try:
                    with writer.begin() as conn:
                        conn.execute(sa.schema.CreateTable(search_pages, if_not_exists=True))
                        for index in search_pages.indexes:
                            conn.execute(sa.schema.CreateIndex(index, if_not_exists=True))
                except BaseException:
                    writer.dispose()
                    raise
                reader = _engine(self.path, pool_size=4, begin="BEGIN", busy_timeout_ms=timeout)
                self._engines = (writer, reader)
            return self._engines
