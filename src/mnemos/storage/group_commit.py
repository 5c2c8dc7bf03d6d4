"""Group commit: writers that queue up behind each other share one durable COMMIT.

SQLite has one writer at a time and a durable COMMIT costs an fsync, so with one transaction per
write the disk, not the CPU, caps writes per second. Here every writer still runs its block
alone, inside a SAVEPOINT of the open transaction (a block that fails rolls back only its own
work; the batch's first block needs none: were it to fail, the transaction holds nothing else
and rolls back whole); when a block ends and nobody is waiting for a turn, or `max_batch`
blocks share the transaction, one COMMIT makes the whole batch durable. Every writer of the
batch returns only after that COMMIT, and if it fails, every writer of the batch gets the
error: nobody is told a write is saved before it is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field

from sqlalchemy.engine import Connection


@dataclass
class _Batch:
    conn: Connection
    transaction: ExitStack  # closing it commits and releases the connection and locks
    size: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class GroupCommit:
    """Serializes writers on one connection and commits those that queue up together."""

    def __init__(
        self,
        open_transaction: Callable[[], AbstractContextManager[Connection]],
        open_lazy: Callable[[], AbstractContextManager[Connection]] | None = None,
        max_batch: int = 64,
    ):
        self._open_transaction = open_transaction
        self._open_lazy = open_lazy or open_transaction
        self._max_batch = max_batch
        self._turn = threading.Lock()
        self._counter = threading.Lock()
        self._waiting = 0
        self._batch: _Batch | None = None

    @contextmanager
    def _in_turn(self) -> Iterator[None]:
        """Wait for this writer's turn, counted among the waiting meanwhile (a batch commits
        when no one waits for a turn)."""
        with self._counter:
            self._waiting += 1
        self._turn.acquire()
        with self._counter:
            self._waiting -= 1
        try:
            yield
        finally:
            self._turn.release()

    @contextmanager
    def write(self) -> Iterator[Connection]:
        with self._in_turn():
            batch = self._batch or self._begin()
            batch.size += 1
            # The batch's first block runs in the transaction itself (were it to fail, the
            # transaction holds nothing else: it rolls back whole); each later one in a
            # SAVEPOINT, so that its failure takes back only its own work.
            savepoint = batch.conn.begin_nested() if batch.size > 1 else None
            try:
                yield batch.conn
            except BaseException as exc:
                if savepoint is None:
                    self._roll_back(batch, exc)
                elif not _in_transaction(batch.conn):
                    # SQLite ended the whole transaction itself (an I/O error, a full disk in a
                    # statement without a statement journal): the earlier blocks' work is gone
                    # too, so every writer of the batch fails with this block (review17).
                    batch.error = exc
                    self._roll_back(batch, exc)
                else:
                    savepoint.rollback()
                raise
            else:
                if savepoint is not None:
                    savepoint.commit()
            finally:
                if self._batch is batch and (self._waiting == 0 or batch.size >= self._max_batch):
                    self._commit(batch)
        batch.done.wait()
        if batch.error is not None:
            raise batch.error

    @contextmanager
    def write_lazily(self) -> Iterator[Connection]:
        """A write in a transaction of its own, opened by `open_lazy` (one whose COMMIT need
        not reach the disk before it returns), in turn with the others: a batch still open
        (its writers wait for its COMMIT) commits first, so no durable write shares it."""
        with self._in_turn():
            if self._batch is not None:
                self._commit(self._batch)
            with self._open_lazy() as conn:
                yield conn

    def _begin(self) -> _Batch:
        transaction = ExitStack()
        try:
            conn = transaction.enter_context(self._open_transaction())
        except BaseException:
            transaction.close()
            raise
        self._batch = _Batch(conn, transaction)
        return self._batch

    def _roll_back(self, batch: _Batch, exc: BaseException) -> None:
        """End the batch of one failed block: its transaction rolls back."""
        self._batch = None
        try:
            batch.transaction.__exit__(type(exc), exc, exc.__traceback__)
        finally:
            batch.done.set()

    def _commit(self, batch: _Batch) -> None:
        self._batch = None
        try:
            batch.transaction.close()
        except BaseException as exc:  # every writer of the batch re-raises it
            batch.error = exc
        batch.done.set()


def _in_transaction(conn: Connection) -> bool:
    """Whether the driver's connection still holds the transaction the batch opened."""
    return bool(conn.connection.dbapi_connection.in_transaction)  # type: ignore[union-attr]
