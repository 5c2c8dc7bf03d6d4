"""The encoded export's batches from the store (`RightsStore.memories_about_encoded`): every
memory about the person once, in the subject index's order, whatever the batch size; on
PostgreSQL the next batch is read ahead while the caller handles one (`storage/pg_export.py`)."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

import mnemos.storage.postgres as postgres
from mnemos.domain.ids import utcnow
from mnemos.domain.models import Scope
from mnemos.storage.base import Store
from mnemos.storage.pg_export import PIPELINED_EXPORTS
from mnemos.storage.postgres import PostgresStore
from mnemos.storage.sql_export import line_object
from tests.world import World, agent_memory


def _about(world: World, store: Store, count: int, content: str = "fact") -> uuid.UUID:
    """`count` memories about a person, by two agents in two tenants and in two scopes, some
    stored at the same instant (the keyset's last column, the id, tells them apart)."""
    ann, bob = world.user("Ann", "acme"), world.user("Bob", "globex")
    agents = [world.agent(ann, "Ann's bot"), world.agent(bob, "Bob's bot")]
    start = utcnow()
    for i in range(count):
        agent = agents[i % 2]
        at = start + timedelta(seconds=i // 3)
        scope = Scope.SUBJECT if i % 5 else Scope.AGENT
        memory = agent_memory(
            agent, f"{content} {i}", at, scope=scope, subject_id=uuid.UUID(ann.id)
        )
        store.replace_memories(agent.tenant, [memory], [], at)
    return uuid.UUID(ann.id)


@pytest.mark.parametrize("limit", [1, 2, 4, 9, 10])
def test_every_memory_once_in_order_at_any_batch_size(
    world: World, store: Store, limit: int
) -> None:
    person = _about(world, store, 9)
    expected = [str(m.id) for m in store.memories_about(person, after=None, limit=100)]
    assert len(expected) == 9
    batches = list(store.memories_about_encoded(person, limit=limit))
    assert [len(b.lines) for b in batches] == [limit] * (9 // limit) + [9 % limit] * (9 % limit > 0)
    exported = [json.loads(line)["id"] for batch in batches for line in batch.lines]
    assert exported == expected
    for batch in batches:
        assert all(isinstance(line, bytes) for line in batch.lines)  # as the database sent it
        assert len(batch.keys) == len(batch.lines)
        assert set(batch.keys) == set(batch.owners)


def test_nothing_about_a_stranger(world: World, store: Store) -> None:
    _about(world, store, 3)
    assert list(store.memories_about_encoded(uuid.uuid4(), limit=2)) == []


def _pg_store(store: Store, monkeypatch: pytest.MonkeyPatch, timeout_ms: int) -> PostgresStore:
    if not isinstance(store, PostgresStore):
        pytest.skip("PostgreSQL reads the export ahead")
    monkeypatch.setattr(postgres, "STATEMENT_TIMEOUT_MS", timeout_ms)
    return PostgresStore(_url(store))


def _url(store: Store) -> str:
    return store._write_engine.url.render_as_string(hide_password=False)  # type: ignore[attr-defined]


def _batch_statements(url: str) -> list[tuple[str, str | None]]:
    """The (state, wait event) of every other session whose statement is an export batch."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT state, wait_event FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
            "AND query LIKE 'SELECT m.scope, m.inserted_at, m.id, %'"
        ).fetchall()
    return [(row[0], row[1]) for row in rows]


def test_the_next_batch_is_read_ahead_and_again_after_a_long_pause(
    world: World, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch sent before a pause longer than the statement timeout stops writing once the
    socket's buffers are full, and is cancelled: it is read again, and the export goes on."""
    slow = _pg_store(store, monkeypatch, timeout_ms=1_000)

    def small_buffer(dbapi_conn: Any, _record: Any) -> None:
        # A receive buffer that never grows: the server's writes block a few MB into a batch.
        with socket.socket(fileno=os.dup(dbapi_conn.pgconn.socket)) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)

    sa.event.listen(slow._write_engine, "connect", small_buffer)  # type: ignore[attr-defined]
    try:
        person = _about(world, store, 24, content="x" * 1_000_000)  # 8 MB a batch of 8
        expected = [str(m.id) for m in store.memories_about(person, after=None, limit=100)]
        batches = slow.memories_about_encoded(person, limit=8)
        first = next(batches)
        ahead = _batch_statements(_url(slow).replace("postgresql+psycopg", "postgresql"))
        assert ahead and ahead[0][0] in {"active", "idle in transaction"}, ahead
        time.sleep(1.5)
        rest = list(batches)
        exported = [json.loads(line)["id"] for b in [first, *rest] for line in b.lines]
        assert exported == expected
    finally:
        slow.close()


def test_only_a_few_exports_at_once_hold_a_connection(
    world: World, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past `PIPELINED_EXPORTS` exports at once, an export reads batch by batch (a connection
    per batch) and gives the same batches."""
    pg = _pg_store(store, monkeypatch, timeout_ms=15_000)
    try:
        person = _about(world, store, 5)
        expected = [str(m.id) for m in pg.memories_about(person, after=None, limit=100)]
        pool = pg._read_engine.pool  # noqa: SLF001
        held = [pg.memories_about_encoded(person, limit=2) for _ in range(PIPELINED_EXPORTS)]
        firsts = [next(export) for export in held]
        assert pool.checkedout() == PIPELINED_EXPORTS
        late = pg.memories_about_encoded(person, limit=2)
        batches = [next(late)]
        assert pool.checkedout() == PIPELINED_EXPORTS  # none held between its batches
        batches += list(late)
        assert [json.loads(line)["id"] for b in batches for line in b.lines] == expected
        assert batches[0].lines == firsts[0].lines
        for export in held:
            export.close()
        assert pool.checkedout() == 0
    finally:
        pg.close()


_JSON_BUILD_OBJECT_LINE = """json_build_object(
    'id', m.id, 'content', m.content, 'thought', m.thought, 'system', m.system, 'type', m.type,
    'segment', m.segment, 'scope', m.scope, 'subject_id', m.subject_id,
    'organization_id', m.organization_id, 'source_agent_id', m.source_agent_id,
    'chat_room_id', m.chat_room_id, 'metadata', coalesce(m.metadata::json, '{}'::json),
    'status', m.status,
    'inserted_at', to_char(m.inserted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'updated_at', to_char(m.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'history', (SELECT coalesce(json_agg(json_build_object(
        'event', h.event, 'actor', json_build_object('type', h.actor_type, 'id', h.actor_id),
        'request_id', h.request_id, 'superseded_by', h.superseded_by,
        'at', to_char(h.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
    ) ORDER BY h.pk), '[]'::json) FROM memory_history h
    WHERE h.tenant_id = m.tenant_id AND h.memory_id = m.id))::text"""


def test_postgresql_writes_the_bytes_json_build_object_writes(
    world: World, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL's lines are concatenated, not built by `json_build_object`: byte for byte what
    `json_build_object` writes, escapes, nulls, stored metadata text and histories included."""
    _pg_store(store, monkeypatch, timeout_ms=15_000).close()
    contents = ['say "hi" \\ back', "tab\tnew\nline\x01\x1f end", "é ✓ 😀 \u2028", "x"]
    person = _about(world, store, len(contents))
    memories = list(store.memories_about(person, after=None, limit=100))
    url = _url(store).replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(url, autocommit=True) as conn:
        for memory, content in zip(memories, contents, strict=True):
            conn.execute("UPDATE memories SET content = %s WHERE id = %s", (content, memory.id))
        first, second = memories[0].id, memories[1].id
        conn.execute(
            "UPDATE memories SET thought = %s, chat_room_id = NULL, metadata = %s::json "
            "WHERE id = %s",
            ('a "thought"\n', '{"b" :  1e20, "a": [-0.0, "\\u00e9"]}', first),
        )
        conn.execute(
            "INSERT INTO memory_history (tenant_id, memory_id, subject_id, event, actor_type, "
            "actor_id, request_id, superseded_by, at) SELECT tenant_id, id, subject_id, "
            "'superseded', 'user', NULL, %s, %s, now() FROM memories WHERE id = %s",
            ('req "1"\\', second, first),
        )
        conn.execute("DELETE FROM memory_history WHERE memory_id = %s", (second,))
        rows = conn.execute(
            f"SELECT {line_object('postgresql', 'm')}, {_JSON_BUILD_OBJECT_LINE} "
            "FROM memories m WHERE m.subject_id = %s ORDER BY m.id",
            (person,),
        ).fetchall()
    assert len(rows) == len(contents)
    for ours, reference in rows:
        assert ours == reference
        json.loads(ours)
    assert any(len(json.loads(ours)["history"]) == 2 for ours, _ in rows)
    assert any(json.loads(ours)["history"] == [] for ours, _ in rows)
