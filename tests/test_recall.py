"""Recall by meaning (docs/search.md): the search routes, every mode and filter, visibility,
removal, reindexing and the embedder switched off, with the real local embedder, on every
backend."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from numpy.typing import NDArray

from mnemos import indexer
from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain import recall
from mnemos.domain.ids import utcnow, uuid7
from mnemos.domain.models import Memory, Scope
from mnemos.domain.ports import Embedder
from mnemos.domain.queries import Audience, MemoryQuery
from mnemos.domain.recall import SearchMode
from mnemos.embedding import load_embedder
from mnemos.errors import InvalidPagination
from mnemos.indexer import drain
from mnemos.storage import rows, sql, sql_vectors
from mnemos.storage.base import Store
from mnemos.storage.sqlite_kept import SUFFIX
from tests.test_ranking import pool_pays
from tests.world import Actor, World, agent_memory, memory_body

KEPT = timedelta(minutes=30)

AISLE = "The customer prefers aisle seats on long flights."
OTHERS = [
    "The quarterly report is due on the first Monday of March.",
    "Our office printer on the third floor jams when printing double-sided.",
    "The client's dog is called Biscuit and is afraid of thunder.",
    "Deploys to production happen only on Tuesdays after the standup.",
    "She is allergic to peanuts and avoids Thai restaurants.",
]
QUESTION = "where does the client like to sit on a plane?"


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    loaded = load_embedder("local")
    assert loaded is not None
    return loaded


class Renamed:
    """The same vectors under another model name: what a change of model looks like."""

    def __init__(self, inner: Embedder, model: str):
        self.inner = inner
        self.model = model
        self.dimensions = inner.dimensions

    def embed(self, texts: Any) -> NDArray[np.float32]:
        return self.inner.embed(texts)


@pytest.fixture
def app_client(settings: Settings, store: Store, embedder: Embedder) -> Iterator[TestClient]:
    with TestClient(create_app(settings, store, embedder)) as client:
        yield client


def put(client: TestClient, agent: Actor, content: str, **fields: Any) -> str:
    response = client.post(
        "/api/v1/agent/memories", json=memory_body(content, **fields), headers=agent.headers
    )
    assert response.status_code == 201, response.text
    memory_id: str = response.json()["data"]["id"]
    return memory_id


def search(
    client: TestClient, actor: Actor, query: str = QUESTION, *, human: bool = False, **params: Any
) -> dict[str, Any]:
    path = "/api/v1/me/memories/search" if human else "/api/v1/agent/memories/search"
    response = client.get(path, params={"query": query, **params}, headers=actor.headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def ids(body: dict[str, Any]) -> list[str]:
    return [row["id"] for row in body["data"]]


def listed(client: TestClient, actor: Actor, *, human: bool = False, **params: Any) -> set[str]:
    path = "/api/v1/me/memories" if human else "/api/v1/agent/memories"
    response = client.get(path, params={"limit": 100, **params}, headers=actor.headers)
    assert response.status_code == 200, response.text
    return {row["id"] for row in response.json()["data"]}


def stored_directly(contents: list[str], agent: Actor, **owners: Any) -> list[Memory]:
    """Memories of `agent` with these contents, as `Store.replace_memories` takes them (agent
    scope unless `owners` says otherwise: scope, subject_id, organization_id)."""
    now = utcnow()
    return [agent_memory(agent, content, now, thought="t", **owners) for content in contents]


@pytest.fixture
def acme(world: World) -> dict[str, Actor]:
    ann = world.user("Ann", "acme")
    bob = world.user("Bob", "acme")
    eve = world.user("Eve", "evil")
    return {
        "ann": ann,
        "bob": bob,
        "eve": eve,
        "writer": world.agent(ann, "Writer"),
        "peer": world.agent(bob, "Peer"),
        "outsider": world.agent(eve, "Outsider"),
    }


def test_semantic_finds_a_paraphrase_keyword_does_not(
    app_client: TestClient, store: Store, embedder: Embedder, acme: dict[str, Actor]
) -> None:
    writer = acme["writer"]
    aisle = put(app_client, writer, AISLE)
    for text in OTHERS:
        put(app_client, writer, text)
    drain(store, embedder)

    semantic = search(app_client, writer, mode="semantic", limit=3)
    assert semantic["meta"]["mode"] == "semantic" and semantic["meta"]["limit"] == 3
    assert semantic["meta"]["has_more"] is True
    assert ids(semantic)[0] == aisle
    assert len(semantic["data"]) == 3
    hybrid = search(app_client, writer)
    assert hybrid["meta"] == {"mode": "hybrid", "limit": 10, "has_more": False, "next_cursor": None}
    assert ids(hybrid)[0] == aisle
    keyword = search(app_client, writer, "client sit plane", mode="keyword")
    assert keyword["data"] == []  # no memory has these words
    assert ids(search(app_client, writer, "aisle seats", mode="keyword")) == [aisle]


@pytest.mark.parametrize("mode", ["hybrid", "semantic", "keyword"])
def test_a_first_page_reads_the_rows_of_its_page_only(
    app_client: TestClient,
    store: Store,
    embedder: Embedder,
    acme: dict[str, Actor],
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A first page ranks its whole answer (up to 200 deep) by id and score, and reads the
    memory rows of the page it returns (and one more, to know whether a next page exists):
    ranking never turns rows it does not return into memories."""
    writer = acme["writer"]
    for text in [AISLE, *OTHERS, *(f"{AISLE} Note {n}." for n in range(6))]:
        put(app_client, writer, text)
    drain(store, embedder)
    read: list[uuid.UUID] = []

    def counted(row: Any) -> Memory:
        memory = rows.to_memory(row)
        read.append(memory.id)
        return memory

    for module in (sql, sql_vectors):
        monkeypatch.setattr(module, "to_memory", counted, raising=False)

    page = search(app_client, writer, "aisle seats", mode=mode, limit=2)

    assert len(page["data"]) == 2 and page["meta"]["has_more"] is True
    assert len(read) <= 3, read


@pytest.mark.parametrize("mode", ["hybrid", "semantic", "keyword"])
def test_best_first_with_memory_fields_and_score(
    app_client: TestClient, store: Store, embedder: Embedder, acme: dict[str, Actor], mode: str
) -> None:
    writer = acme["writer"]
    for text in ["tea in the morning", "tea, tea and more tea", "tea with the staff", AISLE]:
        put(app_client, writer, text)
    drain(store, embedder)
    body = search(app_client, writer, "tea", mode=mode, limit=50)
    assert body["meta"]["mode"] == mode
    scores = [row["score"] for row in body["data"]]
    assert scores == sorted(scores, reverse=True) and len(scores) >= 3
    shown = body["data"][0]
    assert {"id", "content", "scope", "status", "metadata", "inserted_at", "score"} <= set(shown)


FILTERS: list[dict[str, Any]] = [
    {},
    {"memory_scope": "org"},
    {"memory_scope": "org", "scope": "all"},
    {"memory_scope": "org", "scope": "agent"},
    {"memory_scope": "me", "scope": "subject"},
    {"memory_scope": "me", "scope": "organization"},
    {"system": "working"},
    {"type": "procedural"},
    {"segment": "tool"},
    {"status": "superseded"},
    {"status": "all"},
]


def _mixed(client: TestClient, acme: dict[str, Actor]) -> dict[str, str]:
    """Memories of every scope, system, type, segment and status, by two agents."""
    writer, peer, bob = acme["writer"], acme["peer"], acme["bob"]
    made = {
        "private": put(client, writer, "my private note about aisle seats"),
        "org": put(client, writer, "the team likes window seats", scope="organization"),
        "about_bob": put(client, writer, "Bob prefers aisle seats", subject_id=bob.id),
        "working": put(client, writer, "seat map loaded", system="working", type="procedural"),
        "tool": put(client, writer, "seat booking tool answered", segment="tool"),
        "peer_org": put(client, peer, "exit row seats cost extra", scope="organization"),
        "peer_private": put(client, peer, "peer's secret seat wish"),
        "old": put(client, writer, "used to like middle seats", scope="organization"),
    }
    response = client.post(
        f"/api/v1/agent/memories/{made['old']}/supersede", headers=writer.headers
    )
    assert response.status_code == 200
    put(client, acme["outsider"], "outsider likes aisle seats", scope="organization")
    return made


@pytest.mark.parametrize("params", FILTERS, ids=lambda p: "-".join(map(str, p.values())) or "none")
def test_every_agent_filter_returns_exactly_the_list(
    app_client: TestClient,
    store: Store,
    embedder: Embedder,
    acme: dict[str, Actor],
    params: dict[str, Any],
) -> None:
    _mixed(app_client, acme)
    drain(store, embedder)
    writer = acme["writer"]
    expected = listed(app_client, writer, **params)
    for mode in ("semantic", "hybrid"):
        found = ids(search(app_client, writer, "seats", mode=mode, limit=50, **params))
        assert set(found) == expected and len(found) == len(expected)
    keyword = ids(search(app_client, writer, "seat", mode="keyword", limit=50, **params))
    assert set(keyword) <= expected


def test_subject_filter(
    app_client: TestClient, store: Store, embedder: Embedder, acme: dict[str, Actor]
) -> None:
    made = _mixed(app_client, acme)
    drain(store, embedder)
    params = {"memory_scope": "org", "scope": "subject", "subject_id": acme["bob"].id}
    found = ids(search(app_client, acme["peer"], "seats", mode="semantic", **params))
    assert found == [made["about_bob"]]


@pytest.mark.parametrize("scope", ["all", "about_me", "organization", "room"])
def test_human_search_is_the_human_list_with_display_fields(
    app_client: TestClient,
    store: Store,
    embedder: Embedder,
    acme: dict[str, Actor],
    scope: str,
) -> None:
    _mixed(app_client, acme)
    drain(store, embedder)
    for person in (acme["ann"], acme["bob"], acme["eve"]):
        expected = listed(app_client, person, human=True, scope=scope)
        body = search(
            app_client, person, "seats", human=True, scope=scope, mode="semantic", limit=50
        )
        assert set(ids(body)) == expected
        for row in body["data"]:
            assert {"subject_name", "source_agent_name", "chat_room_title", "score"} <= set(row)
    ann_all = search(app_client, acme["ann"], "seats", human=True, mode="semantic", limit=50)
    assert any(row["source_agent_name"] == "Writer" for row in ann_all["data"])


def test_removed_memories_are_never_returned(
    app_client: TestClient, store: Store, embedder: Embedder, acme: dict[str, Actor]
) -> None:
    writer, ann = acme["writer"], acme["ann"]
    gone = {
        "superseded": put(app_client, writer, AISLE, scope="organization"),
        "archived": put(app_client, writer, "Aisle seats, always, on any flight."),
        "deleted": put(app_client, writer, "The customer books aisle seats when flying."),
    }
    kept = put(app_client, writer, "The client dislikes window seats on planes.")
    drain(store, embedder)
    assert set(gone.values()) <= set(ids(search(app_client, writer, mode="semantic")))
    headers = writer.headers
    assert (
        app_client.post(
            f"/api/v1/agent/memories/{gone['superseded']}/supersede", headers=headers
        ).status_code
        == 200
    )
    assert (
        app_client.post(
            f"/api/v1/agent/memories/{gone['archived']}/archive", headers=headers
        ).status_code
        == 200
    )
    assert (
        app_client.delete(f"/api/v1/me/memories/{gone['deleted']}", headers=ann.headers).status_code
        == 204
    )
    for mode in ("semantic", "hybrid"):
        assert ids(search(app_client, writer, mode=mode)) == [kept]
        assert ids(search(app_client, ann, human=True, mode=mode)) == [kept]
    old = ids(search(app_client, writer, mode="semantic", status="superseded"))
    assert old == [gone["superseded"]]


def test_search_before_embedding_finds_by_keyword(
    store: Store,
    embedder: Embedder,
    settings: Settings,
    acme: dict[str, Actor],
    world: World,
) -> None:
    """A memory stored with no embedder running (as before this feature: migration 0010 queues
    those): keyword and hybrid find it; once the queue is drained, semantic does too."""
    lone = world.agent(acme["ann"], "Lone")
    with TestClient(create_app(settings, store, None)) as plain:
        memory = put(plain, lone, AISLE)
        assert ids(search(plain, lone, "aisle")) == [memory]
    assert store.vector_backlog() >= 1  # no embedding worker has run (none was started)
    drain(store, embedder)
    with TestClient(create_app(settings, store, embedder)) as client:
        assert ids(search(client, lone, mode="semantic")) == [memory]


def test_reindex_after_a_model_change(
    store: Store, embedder: Embedder, acme: dict[str, Actor], settings: Settings
) -> None:
    writer = acme["writer"]
    with TestClient(create_app(settings, store, None)) as plain:
        aisle = put(plain, writer, AISLE)
        put(plain, writer, OTHERS[0])
    drain(store, embedder)
    newer = Renamed(embedder, "renamed-model-v2")
    probe = newer.embed([QUESTION])[0]
    # Vectors of the old model are not comparable with the new one's: none is used.
    assert store.nearest_memories(_query(store, writer), probe, newer.model, 5) == []
    assert store.queue_for_model(newer.model, batch=1) == 2
    assert store.queue_for_model(newer.model, batch=1) == 0  # resumable: queued once
    assert drain(store, newer) == 2
    found = store.nearest_memories(_query(store, writer), probe, newer.model, 5)
    assert [str(scored.id) for scored in found][0] == aisle
    assert len(found) == 2


def _query(store: Store, agent: Actor) -> Any:
    from mnemos.domain.accounts import hash_key
    from mnemos.domain.memories import AgentListParams, MemoryService
    from mnemos.domain.queries import Filters

    ctx = store.agent_by_key(hash_key(agent.api_key))
    assert ctx is not None
    return MemoryService.agent_query(ctx, AgentListParams(), Filters())


def test_without_an_embedder(store: Store, settings: Settings, acme: dict[str, Actor]) -> None:
    writer = acme["writer"]
    with TestClient(create_app(settings, store, None)) as plain:
        memory = put(plain, writer, AISLE)
        response = plain.get(
            "/api/v1/agent/memories/search",
            params={"query": QUESTION, "mode": "semantic"},
            headers=writer.headers,
        )
        assert response.status_code == 422
        assert response.json()["error"]["code"] == "semantic_search_disabled"
        body = search(plain, writer, "aisle seats")
        assert body["meta"] == {
            "mode": "keyword",
            "limit": 10,
            "requested_mode": "hybrid",
            "fallback": "no embedder",
            "has_more": False,
            "next_cursor": None,
        }
        assert ids(body) == [memory]


@pytest.mark.parametrize(
    "params",
    [
        {"limit": 0},
        {"limit": 51},
        {"limit": "many"},
        {"mode": "fuzzy"},
        {"query": ""},
        {"query": "x" * 501},
        {"status": "gone"},
        {"system": "dreams"},
        {"memory_scope": "org", "scope": "subject"},
    ],
)
def test_bad_input_is_a_clear_422(
    app_client: TestClient, acme: dict[str, Actor], params: dict[str, Any]
) -> None:
    response = app_client.get(
        "/api/v1/agent/memories/search",
        params={"query": QUESTION, **params},
        headers=acme["writer"].headers,
    )
    assert response.status_code == 422, response.text
    codes = {"validation_failed", "invalid_pagination", "subject_id_required"}
    assert response.json()["error"]["code"] in codes


def test_search_needs_a_key(app_client: TestClient) -> None:
    response = app_client.get("/api/v1/agent/memories/search", params={"query": "x"})
    assert response.status_code == 401


def test_content_query_mode_hybrid_ranks_the_list(
    store: Store, embedder: Embedder, settings: Settings, acme: dict[str, Actor]
) -> None:
    writer = acme["writer"]
    ranked = settings.model_copy(update={"content_query_mode": "hybrid"})
    with TestClient(create_app(ranked, store, embedder)) as client:
        best = put(client, writer, "seats seats: aisle seats, window seats, any seats")
        put(client, writer, "a long note on travel where seats come up once among many words")
        drain(store, embedder)
        response = client.get(
            "/api/v1/agent/memories",
            params={"content_query": "seats"},
            headers=writer.headers,
        )
        assert response.status_code == 200
        body = response.json()
        assert [row["id"] for row in body["data"]][0] == best
        assert body["meta"]["has_more"] is False
    with TestClient(create_app(settings, store, embedder)) as client:  # filter: newest first
        body = client.get(
            "/api/v1/agent/memories", params={"content_query": "seats"}, headers=writer.headers
        ).json()
        assert [row["id"] for row in body["data"]][-1] == best


def test_the_sweep_drops_deleted_vectors_from_sealed_chunks(
    store: Store, embedder: Embedder, acme: dict[str, Actor]
) -> None:

    import sqlalchemy as sa

    from mnemos.storage.schema import memories, vector_chunks
    from mnemos.storage.sql_vectors import CHUNK_ROWS

    contents = [f"note {i} about seats" for i in range(CHUNK_ROWS + 10)]
    made = stored_directly(contents, acme["writer"])
    now = made[0].inserted_at
    store.replace_memories(made[0].tenant_id, made, [], now)
    drain(store, embedder)
    with store._read() as conn:  # type: ignore[attr-defined]
        (sealed,) = conn.execute(sa.select(vector_chunks.c.pks)).scalars().all()
        in_chunk = np.frombuffer(bytes(sealed), dtype="<i8").tolist()[:5]
        gone = list(
            conn.execute(sa.select(memories.c.id).where(memories.c.pk.in_(in_chunk))).scalars()
        )
    store.delete_memories(made[0].tenant_id, gone)
    position = store.compact_vectors(None, 1)
    while position is not None:
        position = store.compact_vectors(position, 1)
    with store._read() as conn:  # type: ignore[attr-defined]
        pks = conn.execute(sa.select(memories.c.pk).where(memories.c.id.in_(gone))).all()
        assert pks == []  # deleted; now check no chunk holds their old keys
        blobs = conn.execute(sa.select(vector_chunks.c.pks, vector_chunks.c.rows)).all()
    held = {int(pk) for blob, _ in blobs for pk in np.frombuffer(bytes(blob), dtype="<i8")}
    assert blobs and all(rows == len(bytes(blob)) // 8 for blob, rows in blobs)
    assert len(held) == CHUNK_ROWS - 5  # the sealed chunk lost exactly the five deleted ones


def test_mnemos_reindex_embeds_what_waits_and_is_resumable(tmp_path: Any) -> None:
    import json
    import os
    import subprocess
    import sys

    from mnemos.storage import migrate, open_store

    url = f"sqlite:///{tmp_path / 'reindex.db'}"
    settings = Settings(database_url=url, embedder="none")
    migrate(settings)
    opened = open_store(settings)
    world = World(opened)
    agent = world.agent(world.user("Ann", "acme"))
    with TestClient(create_app(settings, opened, None)) as plain:
        put(plain, agent, AISLE)
        put(plain, agent, OTHERS[0])
    assert opened.vector_backlog() == 2
    env = {**os.environ, "MNEMOS_DATABASE_URL": url, "MNEMOS_EMBEDDER": "local"}

    def reindex() -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-m", "mnemos", "reindex"],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        result: dict[str, Any] = json.loads(done.stdout)
        return result

    first = reindex()
    assert first["embedded"] == 2 and first["model"] == "all-MiniLM-L6-v2-int8"
    assert first["set_aside"] == 0
    assert opened.vector_backlog() == 0
    assert reindex() == {**first, "queued": 0, "embedded": 0}  # nothing left to do
    opened.close()


def test_erasure_leaves_no_vector_behind(
    store: Store, embedder: Embedder, acme: dict[str, Actor]
) -> None:
    """An erasure deletes the person's vectors and rewrites every sealed chunk (agent,
    organization, subject) that held one, in its own transaction: no copy is left to sweep."""
    import uuid as uuid_module

    import sqlalchemy as sa

    from mnemos.domain.history import by_operator
    from mnemos.domain.ids import utcnow
    from mnemos.domain.models import (
        Erasure,
    )
    from mnemos.storage.schema import memories, memory_vectors, vector_chunks
    from mnemos.storage.sql_vectors import CHUNK_ROWS

    writer = acme["writer"]
    ann, bob = uuid_module.UUID(acme["ann"].id), uuid_module.UUID(acme["bob"].id)
    org = uuid_module.UUID(writer.organization_id or "")
    now = utcnow()

    def about(person: uuid_module.UUID, count: int) -> list[Memory]:
        contents = [f"note {i} on where {person.hex[:6]} likes to sit" for i in range(count)]
        return stored_directly(
            contents, writer, scope=Scope.SUBJECT, subject_id=person, organization_id=org
        )

    erased, kept = about(ann, CHUNK_ROWS + 3), about(bob, 40)
    store.replace_memories(org, [*erased[:100], *kept, *erased[100:]], [], now)
    drain(store, embedder)
    with store._read() as conn:  # type: ignore[attr-defined]
        pk_of = dict(conn.execute(sa.select(memories.c.id, memories.c.pk)).all())
    gone = {pk_of[m.id] for m in erased}
    stays = {pk_of[m.id] for m in kept}

    def held() -> set[int]:
        with store._read() as conn:  # type: ignore[attr-defined]
            blobs = conn.execute(sa.select(vector_chunks.c.pks)).scalars().all()
        return {int(pk) for blob in blobs for pk in np.frombuffer(bytes(blob), dtype="<i8")}

    assert gone & held()  # sealed chunks hold the person's vectors before
    count = store.erase_subject(Erasure(uuid7(), ann, by_operator(), utcnow()))
    assert count == len(erased)
    assert not gone & held()
    with store._read() as conn:  # type: ignore[attr-defined]
        vectors = set(conn.execute(sa.select(memory_vectors.c.memory_pk)).scalars())
    assert not gone & vectors
    assert stays <= vectors  # another person's vectors are untouched


TEAS = [
    f"tea note {n}: {kind}"
    for n, kind in enumerate(
        ["green tea at dawn", "black tea with milk", "mint tea after lunch", "iced tea in June"] * 6
    )
]


def every_page(
    client: TestClient,
    actor: Actor,
    query: str,
    *,
    human: bool,
    cursor: str | None = None,
    **params: Any,
) -> list[list[str]]:
    """The ids of each page of one search (from `cursor`), following `next_cursor` to the end."""
    pages: list[list[str]] = []
    while True:
        extra = {"cursor": cursor} if cursor else {}
        body = search(client, actor, query, human=human, **params, **extra)
        pages.append(ids(body))
        cursor = body["meta"]["next_cursor"]
        assert body["meta"]["has_more"] is (cursor is not None)
        if cursor is None:
            return pages
        assert len(pages) < 20, "the pages never end"


@pytest.mark.parametrize("human", [False, True], ids=["agent", "human"])
@pytest.mark.parametrize("mode", ["hybrid", "semantic", "keyword"])
def test_search_pages_neither_repeat_nor_skip(
    app_client: TestClient,
    store: Store,
    embedder: Embedder,
    acme: dict[str, Actor],
    mode: str,
    human: bool,
) -> None:
    writer, ann = acme["writer"], acme["ann"]
    for text in TEAS + OTHERS:
        put(app_client, writer, text, subject_id=ann.id)
    drain(store, embedder)
    reader = ann if human else writer
    whole = ids(search(app_client, reader, "tea", human=human, mode=mode, limit=50))
    assert len(whole) >= len(TEAS)
    pages = every_page(app_client, reader, "tea", human=human, mode=mode, limit=7)
    assert all(len(page) == 7 for page in pages[:-1]) and len(pages) >= 4
    served = [memory_id for page in pages for memory_id in page]
    assert served == whole  # the same order, nothing repeated, nothing skipped


def test_a_cursor_serves_only_its_own_search(
    app_client: TestClient, store: Store, embedder: Embedder, acme: dict[str, Actor]
) -> None:
    writer, peer = acme["writer"], acme["peer"]
    for text in TEAS:
        put(app_client, writer, text, scope="organization")
    drain(store, embedder)
    first = search(app_client, writer, "tea", limit=3)
    cursor = first["meta"]["next_cursor"]
    assert cursor is not None
    path = "/api/v1/agent/memories/search"

    def refused(actor: Actor, **params: Any) -> dict[str, Any]:
        response = app_client.get(path, params=params, headers=actor.headers)
        assert response.status_code == 422, response.text
        error: dict[str, Any] = response.json()["error"]
        assert error["code"] == "invalid_pagination"
        return error

    error = refused(writer, query="coffee", cursor=cursor)
    assert error["details"] == {"cursor": "belongs to another search"}
    refused(writer, query="tea", mode="semantic", cursor=cursor)
    refused(writer, query="tea", status="all", cursor=cursor)
    refused(writer, query="tea", memory_scope="org", cursor=cursor)
    refused(peer, query="tea", cursor=cursor)  # the same words, another agent's list
    refused(writer, query="tea", cursor=cursor[:-2] + ("AA" if cursor[-2:] != "AA" else "BB"))
    listed_page = app_client.get(
        "/api/v1/agent/memories", params={"limit": 1}, headers=writer.headers
    )
    list_cursor = listed_page.json()["meta"]["next_cursor"]
    refused(writer, query="tea", cursor=list_cursor)  # a list's cursor is not a search's
    response = app_client.get(
        "/api/v1/agent/memories", params={"cursor": cursor}, headers=writer.headers
    )
    assert response.status_code == 422  # nor the other way round
    again = search(app_client, writer, "tea", limit=3, cursor=cursor)
    assert not set(ids(again)) & set(ids(first))


RAFTING = [f"The user went rafting on the river, outing number {i}" for i in range(12)]


def test_superseding_what_was_served_skips_nothing_after_it(
    app_client: TestClient, store: Store, embedder: Embedder, acme: dict[str, Actor]
) -> None:
    """Working through results (superseding each memory served) raises every RRF score below
    the cut: the next page still serves exactly the rest of the first answer."""
    writer = acme["writer"]
    for text in RAFTING:
        put(app_client, writer, text)
    drain(store, embedder)
    first = search(app_client, writer, "rafting", limit=5)
    for memory_id in ids(first):
        response = app_client.post(
            f"/api/v1/agent/memories/{memory_id}/supersede", headers=writer.headers
        )
        assert response.status_code == 200, response.text
    cursor = first["meta"]["next_cursor"]
    rest = every_page(app_client, writer, "rafting", human=False, limit=5, cursor=cursor)
    served = [memory_id for page in rest for memory_id in page]
    assert len(served) == len(RAFTING) - 5
    assert set(served) | set(ids(first)) == set(listed(app_client, writer, status="all"))


def test_memories_stored_meanwhile_repeat_nothing(
    app_client: TestClient, store: Store, embedder: Embedder, acme: dict[str, Actor]
) -> None:
    """New matching memories lower every RRF score: a later page neither repeats the first
    nor adds them (they come with the next search)."""
    writer = acme["writer"]
    for text in RAFTING:
        put(app_client, writer, text)
    drain(store, embedder)
    first = search(app_client, writer, "rafting", limit=5)
    new = {put(app_client, writer, f"Rafting again, trip {i}") for i in range(3)}
    drain(store, embedder)
    cursor = first["meta"]["next_cursor"]
    rest = every_page(app_client, writer, "rafting", human=False, limit=5, cursor=cursor)
    served = [memory_id for page in rest for memory_id in page]
    assert not set(served) & set(ids(first)) and not set(served) & new
    assert len(served) == len(RAFTING) - 5
    assert new <= set(ids(search(app_client, writer, "rafting", limit=50)))


def test_semantic_pages_serve_equal_scores_once(
    app_client: TestClient, store: Store, embedder: Embedder, acme: dict[str, Actor]
) -> None:
    """Memories whose ids sort unlike their rows (several writer processes: uuid7s made in one
    order, inserted in another) and whose scores tie are each served once."""
    writer = acme["writer"]
    same = stored_directly(["The same note about kayaks."] * 30, writer)
    for memory in reversed(same):  # rows inserted newest id first
        store.replace_memories(memory.tenant_id, [memory], [], utcnow())
    drain(store, embedder)
    pages = every_page(app_client, writer, "kayaks", human=False, mode="semantic", limit=7)
    served = [memory_id for page in pages for memory_id in page]
    assert sorted(served) == sorted(str(memory.id) for memory in same)


def test_a_search_kept_too_long_has_expired(
    app_client: TestClient,
    acme: dict[str, Actor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writer = acme["writer"]
    for text in RAFTING:
        put(app_client, writer, text)
    monkeypatch.setattr(recall, "KEPT_FOR", timedelta(seconds=-1))
    cursor = search(app_client, writer, "rafting", limit=5)["meta"]["next_cursor"]
    response = app_client.get(
        "/api/v1/agent/memories/search",
        params={"query": "rafting", "limit": 5, "cursor": cursor},
        headers=writer.headers,
    )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_pagination"
    assert error["details"] == {"cursor": "expired"}
    assert "search again" in error["message"]


def test_each_caller_keeps_a_bounded_number_of_searches(
    app_client: TestClient,
    store: Store,
    embedder: Embedder,
    acme: dict[str, Actor],
    database_url: str,
) -> None:
    """Every multi-page search keeps its answer for 30 minutes: a caller's newest
    `kept_per_caller` are kept, an older one's cursor says "expired", and nobody else's
    kept answers are touched."""
    recaller = app_client.app.state.services.memories.recall  # type: ignore[attr-defined]
    recaller.kept_per_caller = 3
    writer, ann = acme["writer"], acme["ann"]
    for text in RAFTING:
        put(app_client, writer, text)
    drain(store, embedder)
    mine = [search(app_client, writer, "rafting", limit=2)["meta"]["next_cursor"]]
    theirs = search(app_client, ann, "rafting", human=True, limit=2)["meta"]["next_cursor"]
    mine += [
        search(app_client, writer, "rafting", limit=2, mode=mode)["meta"]["next_cursor"]
        for mode in ("keyword", "semantic", "hybrid")
    ]
    assert all(mine) and theirs
    kept_in = database_url.replace("postgresql://", "postgresql+psycopg://")
    if kept_in.startswith("sqlite"):
        kept_in += SUFFIX  # SQLite keeps them in a file beside the database
    engine = sa.create_engine(kept_in)
    with engine.connect() as conn:
        owners = conn.execute(
            sa.text("SELECT owner, count(*) FROM search_pages GROUP BY owner")
        ).all()
    engine.dispose()
    assert dict(owners) == {f"agent:{writer.id}": 3, f"user:{ann.id}": 1}

    def next_page(actor: Actor, cursor: str, human: bool = False, **params: Any) -> Any:
        path = "/api/v1/me/memories/search" if human else "/api/v1/agent/memories/search"
        query = {"query": "rafting", "limit": 2, "cursor": cursor, **params}
        return app_client.get(path, params=query, headers=actor.headers)

    expired = next_page(writer, mine[0])
    assert expired.status_code == 422 and expired.json()["error"]["details"] == {
        "cursor": "expired"
    }
    assert next_page(writer, mine[1], mode="keyword").status_code == 200
    assert next_page(writer, mine[3], mode="hybrid").status_code == 200
    assert next_page(ann, theirs, human=True).status_code == 200


def test_postgresql_keeps_a_search_answer_in_one_statement(store: Store) -> None:
    """PostgreSQL keeps a search's answer in one statement (the transaction took a SET and three
    statements between BEGIN and COMMIT): the caller's newest `most` are kept, an older one is
    gone, and a second keep of a kept answer changes nothing."""
    engine = store._write_engine  # type: ignore[attr-defined]
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite keeps its answers in a transaction of a file of their own")
    caller = f"agent:{uuid.uuid4()}"
    ids = [uuid.uuid4().hex for _ in range(4)]
    statements: list[str] = []

    def counted(*args: Any) -> None:
        statements.append(args[2])

    sa.event.listen(engine, "before_cursor_execute", counted)
    try:
        for n, search_id in enumerate(ids):
            store.keep_search(search_id, [(uuid7(), float(n))], utcnow() + KEPT, caller, 3)
        store.keep_search(ids[3], [(uuid7(), 9.0)], utcnow() + KEPT, caller, 3)
    finally:
        sa.event.remove(engine, "before_cursor_execute", counted)
    assert len(statements) == 5
    assert store.kept_search(ids[0]) is None
    assert [len(store.kept_search(search_id) or []) for search_id in ids[1:]] == [1, 1, 1]
    assert (store.kept_search(ids[3]) or [])[0][1] == 3.0


def test_a_hybrid_cursor_continues_where_there_is_no_embedder(
    app_client: TestClient,
    settings: Settings,
    store: Store,
    embedder: Embedder,
    acme: dict[str, Actor],
) -> None:
    """Every process can serve a search's later pages: they read its kept answer."""
    writer = acme["writer"]
    for text in RAFTING:
        put(app_client, writer, text)
    drain(store, embedder)
    first = search(app_client, writer, "rafting", limit=5)
    assert first["meta"]["mode"] == "hybrid"
    with TestClient(create_app(settings, store, None)) as plain:
        cursor = first["meta"]["next_cursor"]
        rest = every_page(plain, writer, "rafting", human=False, limit=5, cursor=cursor)
    served = [memory_id for page in rest for memory_id in page]
    assert sorted(served + ids(first)) == sorted(listed(app_client, writer))


def test_a_search_page_holds_at_most_max_limit(
    app_client: TestClient, acme: dict[str, Actor]
) -> None:
    recaller = app_client.app.state.services.memories.recall  # type: ignore[attr-defined]
    writer = acme["writer"]
    own = Audience(source_agent_id=uuid.UUID(writer.id), tenant_id=writer.tenant)
    query = MemoryQuery(audiences=(own,))
    with pytest.raises(InvalidPagination):
        recaller.search(query, "tea", SearchMode.KEYWORD, recall.MAX_LIMIT + 1, caller="t")


def test_another_organizations_words_change_nothing_here(
    app_client: TestClient, acme: dict[str, Actor]
) -> None:
    """A keyword score tells nothing of other organizations' memories (SQLite's bm25 counts
    the whole index): Eve's writes leave Ann's agent's answer as it was."""
    writer, outsider = acme["writer"], acme["outsider"]
    put(app_client, writer, "quixotrel is the codename of the spring launch")
    put(app_client, writer, "the quixotrel budget was approved by finance, quixotrel again")
    put(app_client, writer, "lunch is at noon")

    def answer() -> list[tuple[str, float]]:
        body = search(app_client, writer, "quixotrel", mode="keyword")
        return [(row["id"], row["score"]) for row in body["data"]]

    before = answer()
    assert len(before) == 2
    for n in range(5):
        put(app_client, outsider, f"quixotrel private note {n}")
    assert answer() == before


def test_keyword_pages_stay_put_while_another_organization_writes(
    app_client: TestClient, acme: dict[str, Actor]
) -> None:
    """SQLite's bm25 moves with the whole index: Eve's writes between two pages of Ann's
    agent's search neither repeat nor skip anything of it."""
    writer, outsider = acme["writer"], acme["outsider"]
    for text in RAFTING:
        put(app_client, writer, text)
    first = search(app_client, writer, "rafting", mode="keyword", limit=5)
    for n in range(20):
        put(app_client, outsider, f"rafting trip {n} of another company")
    cursor = first["meta"]["next_cursor"]
    rest = every_page(
        app_client, writer, "rafting", human=False, mode="keyword", limit=5, cursor=cursor
    )
    served = ids(first) + [memory_id for page in rest for memory_id in page]
    assert sorted(served) == sorted(listed(app_client, writer))


def test_hybrid_ranks_words_among_the_newest_matches_only(
    app_client: TestClient,
    store: Store,
    embedder: Embedder,
    acme: dict[str, Actor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hybrid search's keyword leg scores the newest `HYBRID_POOL` matches when they give it
    its `HYBRID_DEPTH`: a memory older than those gets its share of the score from its meaning
    alone, however well its words match (a keyword search still ranks every match). On
    PostgreSQL, found by the walk (`pool_pays`: a word its statistics call common)."""
    monkeypatch.setattr(recall, "HYBRID_POOL", 2)
    monkeypatch.setattr(recall, "HYBRID_DEPTH", 2)
    writer = acme["writer"]
    oldest = put(app_client, writer, "Tea, tea and more tea: tea at every meal.")
    for text in ["Tea once, in a note about the printer.", "A memo that names tea in passing."]:
        put(app_client, writer, text)
    drain(store, embedder)
    pool_pays(store, monkeypatch)

    assert ids(search(app_client, writer, "tea", mode="keyword"))[0] == oldest
    meaning = ids(search(app_client, writer, "tea", mode="semantic"))[:2]
    hybrid = {row["id"]: row["score"] for row in search(app_client, writer, "tea")["data"]}
    newer = [memory_id for memory_id in hybrid if memory_id != oldest]
    assert len(newer) == 2  # both in the keyword leg
    if oldest in meaning:  # its meaning's share only
        assert hybrid[oldest] == pytest.approx(1 / (recall.RRF_K + 1 + meaning.index(oldest)))
    else:
        assert oldest not in hybrid


def test_another_organizations_memories_about_a_person_leave_the_keyword_leg_alone(
    app_client: TestClient,
    store: Store,
    embedder: Embedder,
    world: World,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Organization A's agent searches what A holds about a person; its one match is first in
    both legs. Organization B storing newer memories about the same person with the same word
    changes nothing in A's answer (review of the pool: on SQLite, B's memories filled A's pool
    through the person's scope token and A's keyword leg came back empty)."""
    monkeypatch.setattr(recall, "HYBRID_POOL", 2)
    person = world.user("Shared Subject")
    ours = world.agent(world.user("Ann", "tenant-a"))
    theirs = world.agent(world.user("Ben", "tenant-b"))
    mine = put(app_client, ours, "Prefers green tea", scope="subject", subject_id=person.id)
    params = {"memory_scope": "org", "scope": "subject", "subject_id": person.id}
    drain(store, embedder)
    both_legs = 2 / (recall.RRF_K + 1)
    before = search(app_client, ours, "tea", **params)
    assert ids(before) == [mine] and before["data"][0]["score"] == pytest.approx(both_legs)
    for text in ["Tea at noon", "Tea again", "More tea"]:
        put(app_client, theirs, text, scope="subject", subject_id=person.id)
    drain(store, embedder)
    after = search(app_client, ours, "tea", **params)
    assert ids(after) == [mine] and after["data"][0]["score"] == pytest.approx(both_legs)


def test_a_store_wakes_the_idle_embedding_worker(
    settings: Settings,
    store: Store,
    embedder: Embedder,
    acme: dict[str, Actor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A memory stored while the worker idles is embedded at once, not at its next look at the
    queue (here a minute away): the store's commit wakes its process's worker."""
    monkeypatch.setattr(indexer, "IDLE_SECONDS", 60.0)
    writer = acme["writer"]
    with TestClient(create_app(settings, store, embedder)) as client:
        put(client, writer, OTHERS[0])
        _embedded_within(store, 30.0)  # the worker's first batch: it idles after this one
        time.sleep(0.5)
        put(client, writer, AISLE)
        waited = _embedded_within(store, 10.0)
        assert search(client, writer, mode="semantic", limit=1)["data"][0]["content"] == AISLE
    assert waited < 10.0


def test_a_listener_taken_off_is_not_told_of_later_stores(
    store: Store, acme: dict[str, Actor]
) -> None:
    """`off_queued` undoes `on_queued` (a stopped worker's wake-up is not kept by the store)."""
    told: list[str] = []
    kept, removed = (lambda: told.append("kept")), (lambda: told.append("removed"))
    store.on_queued(kept)
    store.on_queued(removed)
    store.off_queued(removed)
    store.insert_memory(stored_directly([AISLE], acme["writer"])[0])
    store.off_queued(kept)
    store.insert_memory(stored_directly([OTHERS[0]], acme["writer"])[0])
    assert told == ["kept"]


def _embedded_within(store: Store, seconds: float) -> float:
    """Seconds until the embedding queue is empty (fails after `seconds`)."""
    started = time.monotonic()
    while store.vector_backlog() > 0:
        assert time.monotonic() - started < seconds, "the queued memory was not embedded"
        time.sleep(0.05)
    return time.monotonic() - started
