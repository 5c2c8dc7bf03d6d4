"""The SQLite search-token rule is written in three places: migration 0005's triggers and
migration 0008's refill (SQL, frozen as history) index each memory's owners as tokens;
`sqlite.SCOPE_TOKENS` names them in a query. A search scoped to an owner must find exactly that
owner's memories whichever of the migrations indexed them."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import sqlalchemy as sa

from mnemos.config import Settings
from mnemos.domain.ids import utcnow, uuid7
from mnemos.domain.models import Memory, MemoryType, Scope, Segment, Status, System
from mnemos.domain.queries import Audience
from mnemos.storage import migrate
from mnemos.storage.rows import memory_values
from mnemos.storage.schema import memories
from mnemos.storage.sqlite import SCOPE_TOKENS, SqliteStore, scope_token, scope_tokens_sql
from tests.test_migration_tuya import _without_tenant


def owned_memory() -> Memory:
    """A memory with every owner column set, each to its own id."""
    now = utcnow()
    return Memory(
        id=uuid7(),
        content="likes green tea",
        thought=None,
        system=System.LONG_TERM,
        type=MemoryType.SEMANTIC,
        segment=Segment.USER,
        scope=Scope.SUBJECT,
        subject_id=uuid.uuid4(),
        organization_id=uuid.uuid4(),
        source_agent_id=uuid.uuid4(),
        chat_room_id=uuid.uuid4(),
        metadata={},
        status=Status.ACTIVE,
        inserted_at=now,
        updated_at=now,
        tenant_id=uuid.uuid4(),
    )


def insert(url: str, memory: Memory) -> None:
    """The row alone, as any version of the store wrote it (the triggers index it); the store's
    own insert also writes history, a table the older schema does not have."""
    store = SqliteStore(url)
    try:
        with store._write() as conn:
            known = {column["name"] for column in sa.inspect(conn).get_columns("memories")}
            row = {k: v for k, v in memory_values(memory).items() if k in known}
            table = memories if "tenant_id" in known else _without_tenant(memories)
            conn.execute(table.insert().values(**row))
    finally:
        store.close()


def found_by_token(db: sqlite3.Connection, token: str) -> list[str]:
    rows = db.execute(
        "SELECT m.id FROM memories_fts JOIN memories AS m ON m.pk = memories_fts.rowid "
        "WHERE memories_fts MATCH ?",
        [f'scope : "{token}"'],
    )
    return [uuid.UUID(row[0]).hex for row in rows]


def test_the_migrations_index_the_tokens_a_query_names(tmp_path: Path) -> None:
    path = tmp_path / "tokens.db"
    url = f"sqlite:///{path}"
    migrate(Settings(database_url=url), "0007")
    refilled = owned_memory()  # indexed by 0005's trigger, then again by 0008's refill
    insert(url, refilled)
    migrate(Settings(database_url=url))
    triggered = owned_memory()  # indexed by 0005's trigger on the rebuilt table
    insert(url, triggered)

    with sqlite3.connect(path) as db:
        for memory in (refilled, triggered):
            for column, _prefix in SCOPE_TOKENS:
                audience = Audience(**{column: getattr(memory, column)}, tenant_id=memory.tenant_id)
                token = scope_token(audience)
                assert token is not None
                assert found_by_token(db, token) == [memory.id.hex], column
            (tokens,) = db.execute(
                f"SELECT {scope_tokens_sql('memories')} FROM memories WHERE id = ?",
                [memory.id.hex],
            ).fetchone()
            expected = {
                scope_token(Audience(**{c: getattr(memory, c)}, tenant_id=memory.tenant_id))
                for c, _ in SCOPE_TOKENS
            }
            assert set(tokens.split()) == expected
