"""PostgreSQL's encoded export, pipelined: the database computes the next batch while the
caller encodes and writes this one, on the export's one connection and with no thread.

Batch after batch as `sql_export.read_batch` reads them (the person's tenants, then the keyset
statement after the previous batch's last memory), in psycopg's pipeline mode: once a batch has
arrived, its last memory is read (one row converted), the next batch's statement is sent, and
only then are this batch's lines taken from the result, as the bytes PostgreSQL sent, and
handed over. The server spent 12-15 us a memory building the lines (8-9 us since export13), the
caller 8-10 us encoding and writing them: one after the other the export reached 30-47k
memories/s at 1,000,000 (BENCHMARKS.md, issue 15).

What an export sees is what the per-batch path sees: each statement reads its own snapshot
(READ COMMITTED), each batch starts after the previous batch's last memory, and the tenants are
read again before each batch.

A batch sent before the caller paused is cancelled by the statement timeout if the caller stays
away longer than the timeout: once its rows fill the socket's buffers the statement waits to
write the rest. Such a batch is read again, once; a batch cancelled twice in a row raises.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg.types.string import TextLoader
from sqlalchemy.engine import Dialect

from mnemos.domain.models import EncodedBatch
from mnemos.storage.sql_conditions import tenants_of
from mnemos.storage.sql_export import Key, about_params, batch_of, encoded_statements

PIPELINED_EXPORTS = 2
"""Exports at once per store that read ahead: each holds a connection from its first batch to
its last, whatever the pace of its reader. The others read batch by batch (a connection per
batch), so slow downloads cannot take the pool from everyone else."""


KEPT_AS_TEXT = ("uuid", "timestamptz")
OWNERS, LINE = 3, 4  # `about_statement`'s columns


class Statements:
    """The export's statements as psycopg runs them: the tenants as one array parameter
    (`= ANY(%(tenants)s)`: one text whatever their number)."""

    def __init__(self, dialect: Dialect):
        def text(statement: sa.ClauseElement) -> str:
            compiled = str(statement.compile(dialect=dialect))
            return re.sub(r"IN \(__\[POSTCOMPILE_(\w+)\]\)", r"= ANY(%(\1)s)", compiled)

        self.tenants = text(tenants_of(sa.bindparam("subject", type_=sa.Uuid())))
        self.batch = {first: text(sql) for first, sql in encoded_statements("postgresql").items()}


def pipelined_batches(
    raw: psycopg.Connection[Any], statements: Statements, subject: uuid.UUID, limit: int
) -> Iterator[EncodedBatch]:
    """Every batch of the export (`RightsStore.memories_about_encoded`) on `raw`, the next one
    computed while the caller handles each."""
    after: Key | None = None
    again = False  # whether the batch after `after` was cancelled once already
    while True:
        try:
            with raw.pipeline():
                for found, last in _batches(raw, statements, subject, after, limit):
                    after, again = last, False
                    yield found
            return
        except psycopg.errors.QueryCanceled:
            if again:
                raise
            again = True


def _batches(
    raw: psycopg.Connection[Any],
    statements: Statements,
    subject: uuid.UUID,
    after: Key | None,
    limit: int,
) -> Iterator[tuple[EncodedBatch, Key]]:
    cursor = _send(raw, statements, subject, after, limit)
    while cursor is not None:
        if cursor.fetchone() is None:  # waits for the batch (one row converted)
            return
        count = cursor.rowcount
        cursor.scroll(count - 1, "absolute")
        row = cursor.fetchone()
        assert row is not None
        last: Key = (row[0], row[1], row[2])
        following = _send(raw, statements, subject, last, limit) if count == limit else None
        found = _raw_batch(subject, cursor, count)
        cursor.close()
        yield found, last
        cursor = following


def _raw_batch(subject: uuid.UUID, cursor: psycopg.Cursor[Any], count: int) -> EncodedBatch:
    """The batch's lines and owners' keys as the bytes PostgreSQL sent (text columns): no row
    tuple and no `str` per memory."""
    result = cursor.pgresult
    assert result is not None
    value = result.get_value
    lines = [value(row, LINE) for row in range(count)]
    keys = [value(row, OWNERS) for row in range(count)]
    return batch_of(subject, lines, keys)  # type: ignore[arg-type]  # NOT NULL columns


def _send(
    raw: psycopg.Connection[Any],
    statements: Statements,
    subject: uuid.UUID,
    after: Key | None,
    limit: int,
) -> psycopg.Cursor[Any] | None:
    """Send the batch after `after`, once its tenants are read (None: no memory about them)."""
    tenants = [row[0] for row in raw.execute(statements.tenants, {"subject": subject}).fetchall()]
    if not tenants:
        return None
    cursor = raw.cursor()
    # The keyset's id and time as their text: no UUID or datetime built per row (only the last
    # row's are used, bound back as text of the same session).
    for name in KEPT_AS_TEXT:
        cursor.adapters.register_loader(name, TextLoader)
    cursor.execute(statements.batch[after is None], about_params(subject, tenants, after, limit))
    return cursor
