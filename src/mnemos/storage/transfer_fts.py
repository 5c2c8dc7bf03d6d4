"""`mnemos import` into an empty SQLite database: the full-text index built beside the load.

Tokenizing every memory into the FTS5 index (words, 3- and 4-letter prefixes, owner tokens) is
the largest single cost of an import into SQLite, and SQLite writes with one thread. So a
process of its own (the machine's other core) builds the index while the rows load: it gets
each batch's keys, words and owners, fills an FTS5 table declared as the target's in a scratch
database of its own, and at the end hands back the index's shadow tables (segments, the
segment index, document sizes), which the import copies into the target in its transaction:
pages, not words. FTS5 reads an index from these tables alone, so the copy is the index.

If the side process cannot do its part (it died, or a row came without its key), the import
fills the index itself with `sqlite.INDEX_REFILL_SQL`, as it did before: slower, same result.
The scratch database is a file in a directory of its own, removed at the end whatever happens.
"""

from __future__ import annotations

import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import suppress
from multiprocessing import connection
from operator import itemgetter
from pathlib import Path
from queue import Queue
from typing import Any

from sqlalchemy.engine import Connection

from mnemos.storage.sql_base import driver_connection
from mnemos.storage.sqlite import SCOPE_TOKENS, scope_tokens_sql

INDEX = "memories_fts"
SHADOWS = ("data", "idx", "docsize")  # what an FTS5 index is (its config is the target's own)
COLUMNS = ("pk", "search_text", *(column for column, _ in SCOPE_TOKENS))
HASH_BYTES = 128 << 20  # FTS5 `hashsize`: new entries kept in memory before a segment is written
SIDE_MIN_ROWS = 10_000  # memories in the first batch for the side process to start
QUEUED_BATCHES = 8  # batches the side process holds before the import waits for it
COPY_ROWS = 2_000  # shadow rows per message on the way back
_INSERT = (
    f"INSERT INTO {INDEX}(rowid, search_text, scope) "
    f"SELECT pk, search_text, {scope_tokens_sql('m')} FROM (SELECT "
    + ", ".join(f"? AS {column}" for column in COLUMNS)
    + ") AS m"
)
"""One memory into the side index: what the target's trigger would index (`SCOPE_TOKENS`)."""


class SideIndex:
    """The FTS5 index of the memories an import loads, built by a process of its own.

    The process starts with the first batch of at least `SIDE_MIN_ROWS` memories: a smaller
    import is indexed faster in its own transaction than a process starts."""

    def __init__(self, conn: Connection) -> None:
        self.declaration = conn.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (INDEX,)
        ).scalar_one()
        self.usable = True
        self.sent = 0  # memories handed to the side process
        self.directory: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.pipe: Any = None

    def add(self, keys: list[str], values: list[tuple[Any, ...]]) -> None:
        """A batch of memories as the import writes them (`keys` name the tuples' columns)."""
        if not self.usable:
            return
        if self.process is None:  # the first batch decides
            if len(values) < SIDE_MIN_ROWS or not set(COLUMNS) <= set(keys):
                self.usable = False  # a small import, or keys left to the target
                return
            self._start()
        pick = itemgetter(*(keys.index(column) for column in COLUMNS))
        if self._send(("rows", list(map(pick, values)))):
            self.sent += len(values)

    def _start(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="mnemos-import-fts-"))
        ours, theirs = socket.socketpair()
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-m", __name__, str(theirs.fileno()), str(self.directory)],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
            )
        self.pipe = connection.Connection(ours.detach())
        self._send(("declare", self.declaration))

    def copy_into(self, conn: Connection) -> bool:
        """Wait for the side index and copy its tables over the target's (whose index is still
        empty); False if it could not be built or misses a memory, and then nothing changed."""
        try:
            if not self.usable or self.process is None:
                return False
            held = conn.exec_driver_sql("SELECT count(*) FROM memories").scalar_one()
            if held != self.sent or not self._send(("end", None)):
                return False
            raw = driver_connection(conn)
            raw.execute("SAVEPOINT side_index")
            for shadow in SHADOWS:
                raw.execute(f"DELETE FROM {INDEX}_{shadow}")
            while (message := self._receive()) is not None and message[0] == "rows":
                _, shadow, rows = message
                marks = ", ".join("?" * len(rows[0]))
                raw.executemany(f"INSERT INTO {INDEX}_{shadow} VALUES ({marks})", rows)
            built = message is not None and message[0] == "done"
            if not built:
                raw.execute("ROLLBACK TO side_index")
            raw.execute("RELEASE side_index")
            return built
        finally:
            self.close()

    def close(self) -> None:
        """Stop the side process (if it runs) and remove its scratch database."""
        self.usable = False
        if self.pipe is not None:
            self.pipe.close()
        if self.process is not None:
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _send(self, message: tuple[str, Any]) -> bool:
        try:
            self.pipe.send(message)
        except (BrokenPipeError, OSError):
            self.usable = False
        return self.usable

    def _receive(self) -> Any:
        try:
            return self.pipe.recv()
        except (EOFError, OSError):
            return None


def build(pipe: Any, directory: str) -> None:
    """The side process: the index's declaration, rows in, the index built, its shadow tables'
    rows back, then 'done' (or 'failed' with the reason)."""
    inbox: Queue[tuple[str, Any] | None] = Queue(QUEUED_BATCHES)
    reader = threading.Thread(target=_read, args=(pipe, inbox), daemon=True)
    reader.start()
    try:
        first = inbox.get()
        if first is None or first[0] != "declare":
            return
        db = sqlite3.connect(Path(directory) / "index.db", isolation_level=None)
        db.execute("PRAGMA journal_mode = OFF")  # scratch: nothing to recover
        db.execute("PRAGMA synchronous = OFF")
        db.execute(first[1])
        db.execute(f"INSERT INTO {INDEX}({INDEX}, rank) VALUES ('hashsize', {HASH_BYTES})")
        db.execute("BEGIN")
        while (message := inbox.get()) is not None and message[0] == "rows":
            db.executemany(_INSERT, message[1])
        if message is None:  # the import stopped
            return
        db.execute("COMMIT")
        for shadow in SHADOWS:
            for rows in _pages(db.execute(f"SELECT * FROM {INDEX}_{shadow}")):
                pipe.send(("rows", shadow, rows))
        pipe.send(("done",))
    except Exception as exc:  # reported, and the import indexes by itself
        with suppress(OSError):
            pipe.send(("failed", repr(exc)))
    finally:
        pipe.close()


def _read(pipe: Any, inbox: Queue[tuple[str, Any] | None]) -> None:
    try:
        while True:
            message = pipe.recv()
            inbox.put(message)
            if message[0] not in ("rows", "declare"):
                return
    except (EOFError, OSError):
        inbox.put(None)


def _pages(cursor: sqlite3.Cursor) -> Iterator[list[Any]]:
    while rows := cursor.fetchmany(COPY_ROWS):
        yield rows


if __name__ == "__main__":
    build(connection.Connection(int(sys.argv[1])), sys.argv[2])
