"""People's rights over what is about them: count, export (NDJSON), erase; on both backends."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.storage.base import Store
from mnemos.storage.schema import erasures, idempotency_keys, memories
from tests.world import Actor, World, memory_body


def _store_about(client: TestClient, agent: Actor, subject: Actor, content: str) -> str:
    body = memory_body(content, scope="subject", subject_id=subject.id)
    answer = client.post("/api/v1/agent/memories", json=body, headers=agent.headers)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["data"]["id"])


def _people(world: World) -> tuple[Actor, Actor, Actor, Actor]:
    ann, bob = world.user("Ann", "acme"), world.user("Bob", "acme")
    return ann, bob, world.agent(ann, "Ann's bot"), world.agent(bob, "Bob's bot")


def _export(client: TestClient, who: Actor) -> list[dict[str, Any]]:
    answer = client.get("/api/v1/me/memories/export", headers=who.headers)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in answer.text.splitlines()]


def _search(client: TestClient, agent: Actor, word: str, subject: Actor) -> list[Any]:
    answer = client.get(
        "/api/v1/agent/memories",
        params={
            "memory_scope": "org",
            "scope": "subject",
            "subject_id": subject.id,
            "content_query": word,
            "status": "all",
        },
        headers=agent.headers,
    )
    assert answer.status_code == 200, answer.text
    return list(answer.json()["data"])


def test_export_is_every_memory_about_me_every_status_and_only_mine(
    client: TestClient, world: World
) -> None:
    ann, bob, ann_bot, bob_bot = _people(world)
    about_ann = [_store_about(client, bob_bot, ann, f"ann fact {i}") for i in range(5)]
    archived = about_ann[0]
    client.post(f"/api/v1/me/memories/{archived}/archive", headers=ann.headers)
    _store_about(client, ann_bot, bob, "about bob, stored by ann's agent")
    client.post("/api/v1/agent/memories", json=memory_body("private"), headers=ann_bot.headers)

    lines = _export(client, ann)
    assert sorted(line["id"] for line in lines) == sorted(about_ann)
    assert {line["subject_id"] for line in lines} == {ann.id}
    assert {line["status"] for line in lines} == {"active", "archived"}
    assert all(line["subject_name"] == "Ann" for line in lines)
    assert all(line["source_agent_name"] == "Bob's bot" for line in lines)
    assert all(isinstance(line["history"], list) for line in lines)
    count = client.get("/api/v1/me/memories/count", headers=ann.headers).json()
    assert count == {"data": {"count": 5}}


def test_export_pages_through_batches(client: TestClient, world: World, store: Store) -> None:
    from mnemos.api.app import build_services
    from mnemos.config import Settings

    ann, _bob, _ann_bot, bob_bot = _people(world)
    stored = {_store_about(client, bob_bot, ann, f"fact {i}") for i in range(7)}
    rights = build_services(Settings(), store).rights
    ctx = rights.person(uuid.UUID(ann.id))
    batches = list(rights.export(ctx, batch=3))
    assert [len(b) for b in batches] == [3, 3, 1]
    assert {item.memory.id.hex for b in batches for item in b} == {uuid.UUID(s).hex for s in stored}


def test_erase_removes_rows_and_search_hits_and_keeps_the_rest(
    client: TestClient, world: World, store: Store
) -> None:
    ann, bob, ann_bot, bob_bot = _people(world)
    word = "zanzibarite"
    first = _store_about(client, bob_bot, ann, f"ann collects {word} stones")
    client.post(f"/api/v1/me/memories/{first}/supersede", headers=ann.headers)
    _store_about(client, bob_bot, ann, f"ann polishes {word} weekly")
    about_bob = _store_about(client, ann_bot, bob, f"bob also likes {word}")
    body = memory_body("retried", scope="subject", subject_id=ann.id)
    keyed = {**bob_bot.headers, "Idempotency-Key": "k1"}
    assert client.post("/api/v1/agent/memories", json=body, headers=keyed).status_code == 201
    assert len(_search(client, bob_bot, word, ann)) == 2

    refused = client.post("/api/v1/me/memories/erase", json={}, headers=ann.headers)
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "validation_failed"
    for unsure in ({"confirm": "yes"}, {"confirm": 1}, {"confirm": False}):
        answer = client.post("/api/v1/me/memories/erase", json=unsure, headers=ann.headers)
        assert answer.status_code == 422, unsure

    answer = client.post("/api/v1/me/memories/erase", json={"confirm": True}, headers=ann.headers)
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"]["erased"] == 3
    assert _search(client, bob_bot, word, ann) == []
    assert len(_search(client, ann_bot, word, bob)) == 1  # others' memories stay
    assert client.get(f"/api/v1/me/memories/{about_bob}", headers=bob.headers).status_code == 200
    assert _export(client, ann) == []
    again = client.post("/api/v1/me/memories/erase", json={"confirm": True}, headers=ann.headers)
    assert again.json()["data"]["erased"] == 0

    with store._read() as conn:  # type: ignore[attr-defined]
        left = conn.execute(
            sa.select(sa.func.count()).where(memories.c.subject_id == uuid.UUID(ann.id))
        ).scalar_one()
        events = conn.execute(
            sa.select(erasures.c.erased, erasures.c.actor_type, erasures.c.actor_id)
            .where(erasures.c.subject_id == uuid.UUID(ann.id))
            .order_by(erasures.c.at)
        ).all()
        keys = conn.execute(sa.select(sa.func.count()).select_from(idempotency_keys)).scalar_one()
    assert left == 0
    assert keys == 0  # the key's fingerprint digests the request, content included
    assert [tuple(e) for e in events] == [(3, "user", ann.id), (0, "user", ann.id)]


def test_erase_and_export_need_a_person(client: TestClient, world: World) -> None:
    ann = world.user("Ann", "acme")
    bot = world.agent(ann)
    for method, path in (
        ("GET", "/api/v1/me/memories/export"),
        ("GET", "/api/v1/me/memories/count"),
        ("POST", "/api/v1/me/memories/erase"),
    ):
        answer = client.request(method, path, json={"confirm": True}, headers=bot.headers)
        assert answer.status_code == 401, path
        assert client.request(method, path, json={"confirm": True}).status_code == 401


def test_the_database_encodes_the_export_line_for_line(
    client: TestClient, world: World, store: Store
) -> None:
    """The NDJSON route's fast path (JSON written by SQL) gives the lines `exported_json`
    writes from domain objects: every field, display name and change, across batches."""
    from mnemos.api.app import build_services
    from mnemos.api.rights import encoded_lines, exported_json
    from mnemos.config import Settings

    ann, _bob, _ann_bot, bob_bot = _people(world)
    stored = []
    for i in range(7):
        metadata = {"n": i, "nested": {"x": [1.5, None, "y"], "t": True}}
        body = memory_body(f'fact {i} "quoted" é\n', scope="subject", subject_id=ann.id)
        body["memory"]["metadata"] = metadata
        answer = client.post("/api/v1/agent/memories", json=body, headers=bob_bot.headers)
        assert answer.status_code == 201, answer.text
        stored.append(answer.json()["data"]["id"])
    client.post(f"/api/v1/me/memories/{stored[0]}/supersede", headers=ann.headers)
    client.post(f"/api/v1/me/memories/{stored[1]}/archive", headers=ann.headers)
    rights = build_services(Settings(), store).rights
    ctx = rights.person(uuid.UUID(ann.id))
    expected = [exported_json(item) for batch in rights.export(ctx) for item in batch]
    lines = b"".join(encoded_lines(rights.export_encoded(ctx, batch=3))).splitlines()
    assert [json.loads(line) for line in lines] == json.loads(json.dumps(expected))
    assert any(len(line["history"]) > 1 for line in expected)


def test_the_page_export_binds_the_subjects_tenants(
    client: TestClient, world: World, store: Store
) -> None:
    """`RightsService.export` (the web page's and the admin command's) reads the person's tenants
    first and binds them as values, as the encoded export does: a `subject_tenants` subquery in
    the memories' statement hides the (tenant, subject) statistics from PostgreSQL's planner."""
    from mnemos.api.app import build_services
    from mnemos.config import Settings

    ann, _bob, _ann_bot, bob_bot = _people(world)
    stored = {_store_about(client, bob_bot, ann, f"ann fact {i}") for i in range(5)}
    rights = build_services(Settings(), store).rights
    ctx = rights.person(uuid.UUID(ann.id))
    statements: list[tuple[str, Any]] = []

    def listener(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        statements.append((statement, parameters))

    engine = store._read_engine  # type: ignore[attr-defined]
    sa.event.listen(engine, "before_cursor_execute", listener)
    try:
        exported = [item.memory for batch in rights.export(ctx, batch=2) for item in batch]
    finally:
        sa.event.remove(engine, "before_cursor_execute", listener)
    assert {str(memory.id) for memory in exported} == stored
    tenants = {memory.tenant_id for memory in exported}
    about = [
        (sql, parameters)
        for sql, parameters in statements
        if "FROM memories" in sql and "memories.subject_id = " in sql
    ]
    assert len(about) == 3  # batches of 2, 2 and 1
    for sql, parameters in about:
        assert "subject_tenants" not in sql, sql
        values = parameters.values() if isinstance(parameters, dict) else parameters
        assert tenants <= {_uuid(value) for value in values}, parameters


def _uuid(value: Any) -> Any:
    if isinstance(value, str) and len(value) == 32:
        return uuid.UUID(value)  # SQLite binds a UUID as its hex digits
    return value


def test_a_deleted_memory_leaves_no_vector_queue_entry(
    client: TestClient, world: World, store: Store
) -> None:
    """The vector tables name their memory without a foreign key on PostgreSQL (migration
    0013): the delete path removes their rows itself, for a delete as for an erasure."""
    from mnemos.storage.schema import vector_queue

    ann, _bob, _ann_bot, bob_bot = _people(world)
    deleted = _store_about(client, bob_bot, ann, "to be deleted")
    _store_about(client, bob_bot, ann, "to be erased")
    with store._read() as conn:  # type: ignore[attr-defined]
        pks = conn.execute(sa.select(memories.c.pk, memories.c.id)).all()
        queued = set(conn.execute(sa.select(vector_queue.c.memory_pk)).scalars())
    assert {pk for pk, _ in pks} <= queued
    assert client.delete(f"/api/v1/me/memories/{deleted}", headers=ann.headers).status_code == 204
    with store._read() as conn:  # type: ignore[attr-defined]
        left = set(conn.execute(sa.select(vector_queue.c.memory_pk)).scalars())
    assert left == {pk for pk, memory_id in pks if str(memory_id) != deleted}
    client.post("/api/v1/me/memories/erase", json={"confirm": True}, headers=ann.headers)
    with store._read() as conn:  # type: ignore[attr-defined]
        assert conn.execute(sa.select(vector_queue.c.memory_pk)).all() == []


def test_both_exports_hold_every_tenants_memories_about_the_person_and_nothing_else(
    client: TestClient, world: World, store: Store
) -> None:
    """The exports bind the person's tenants as values (`read_tenants_of`): memories about them
    from their organization, two others and an agent whose owner has none, in batches across
    tenants; nothing about someone else, even in those tenants or by their own agent (review7)."""
    from mnemos.api.app import build_services
    from mnemos.config import Settings

    ann, bob, ann_bot, _bob_bot = _people(world)
    writers = [
        ann_bot,
        world.agent(world.user("Cy", "org-b")),
        world.agent(world.user("Di", "org-c")),
        world.agent(world.user("Ed")),  # no organization: Ed's own tenant
    ]
    about_ann = {
        _store_about(client, w, ann, f"ann {i} by {n}")
        for n, w in enumerate(writers)
        for i in range(3)
    }
    for n, writer in enumerate(writers):
        _store_about(client, writer, bob, f"bob by {n}")
    rights = build_services(Settings(), store).rights
    ctx = rights.person(uuid.UUID(ann.id))
    paged = [str(item.memory.id) for batch in rights.export(ctx, batch=2) for item in batch]
    assert sorted(paged) == sorted(about_ann)
    encoded = [
        json.loads(line)["id"] for line in b"".join(encoded_lines_of(rights, ctx)).splitlines()
    ]
    assert sorted(encoded) == sorted(about_ann)
    assert sorted(line["id"] for line in _export(client, ann)) == sorted(about_ann)


def encoded_lines_of(rights: Any, ctx: Any) -> list[bytes]:
    from mnemos.api.rights import encoded_lines

    return list(encoded_lines(rights.export_encoded(ctx, batch=2)))


def test_a_download_cut_short_closes_its_export_in_a_thread() -> None:
    """`in_threads` closes the chunks of a response that ends early, off the event loop: the
    encoded export holds a connection and a batch in flight until it is closed."""
    import threading

    import anyio

    from mnemos.api.rights import in_threads

    closed_in: list[threading.Thread] = []

    def chunks() -> Iterator[bytes]:
        try:
            yield b"one"
            yield b"two"
        finally:
            closed_in.append(threading.current_thread())

    source = chunks()  # kept: only `in_threads` may close it

    async def download_one_chunk() -> None:
        stream = in_threads(source, anyio.CapacityLimiter(1))
        assert await stream.__anext__() == b"one"
        await stream.aclose()  # type: ignore[attr-defined]

    anyio.run(download_one_chunk)
    assert len(closed_in) == 1
    assert closed_in[0] is not threading.main_thread()
