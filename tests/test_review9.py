"""Findings of the hostile live review "review9" (2026-12-05), each reproduced through the app.

Each test failed on the code it was written against (a strict xfail then) and passes since
its finding was fixed (docs/decisions.md, "A kept search answer is a cache on every path").
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain.ports import Embedder
from mnemos.indexer import drain
from mnemos.storage.base import Store
from mnemos.storage.schema import memories, memory_vectors, vector_chunks
from mnemos.storage.sql_vectors import CHUNK_ROWS
from mnemos.storage.sqlite_kept import SUFFIX
from tests.test_recall import embedder, put  # noqa: F401  (the session's real local embedder)
from tests.world import World, memory_body

SEARCH = "/api/v1/agent/memories/search"


@pytest.fixture
def app_client(settings: Settings, store: Store, embedder: Embedder) -> Iterator[TestClient]:  # noqa: F811
    with TestClient(create_app(settings, store, embedder)) as client:
        yield client


def test_a_search_without_its_query_names_the_query_parameter(
    client: TestClient, world: World
) -> None:
    agent = world.agent(world.user("Ann", "acme"))
    response = client.get(SEARCH, headers=agent.headers)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_failed"
    assert error["details"] == {"query": "Field required"}


def test_a_deleted_memory_leaves_no_sealed_vector_once_its_key_is_reused(
    app_client: TestClient,
    store: Store,
    embedder: Embedder,  # noqa: F811
    world: World,
) -> None:
    """docs/search.md: a deleted memory's copies sealed in chunks "are removed by the embedding
    workers' sweep". The sweep keeps a chunk entry whose `(tenant, memory_pk)` still has a row in
    `memory_vectors`; SQLite's `memories.pk` is a plain INTEGER PRIMARY KEY (no AUTOINCREMENT),
    so the newest memory's pk, once deleted, is given to the next memory stored. When that
    memory is in the same tenant and embedded before the sweep reaches the chunk, the deleted
    memory's int8 vector stays sealed for good (and its pk now names another memory)."""
    ann = world.user("Ann", "acme")
    writer = world.agent(ann, "Writer")
    ids = [
        put(app_client, writer, f"Private note {i}: allergic to penicillin and shellfish")
        for i in range(CHUNK_ROWS)
    ]
    drain(store, embedder)
    newest = uuid.UUID(ids[-1])
    with store._read() as conn:  # type: ignore[attr-defined]
        (pk,) = conn.execute(sa.select(memories.c.pk).where(memories.c.id == newest)).one()
        vector = bytes(
            conn.execute(
                sa.select(memory_vectors.c.vector).where(memory_vectors.c.memory_pk == pk)
            ).scalar_one()
        )
        sealed = [
            bytes(blob) for blob in conn.execute(sa.select(vector_chunks.c.vectors)).scalars()
        ]

    def held(blobs: list[bytes]) -> bool:
        size = len(vector)
        return any(
            blob[at : at + size] == vector for blob in blobs for at in range(0, len(blob), size)
        )

    assert held(sealed)  # the memory's vector is sealed in its owner's chunk
    # Ann deletes her agent's newest memory "for good"; the agent goes on storing.
    gone = app_client.delete(f"/api/v1/me/memories/{newest}", headers=ann.headers)
    assert gone.status_code == 204, gone.text
    put(app_client, writer, "The weekly grocery order goes out on Fridays")
    drain(store, embedder)
    position = store.compact_vectors(None, 8)
    while position is not None:
        position = store.compact_vectors(position, 8)
    with store._read() as conn:  # type: ignore[attr-defined]
        after = [bytes(blob) for blob in conn.execute(sa.select(vector_chunks.c.vectors)).scalars()]
    assert not held(after), "the deleted memory's vector is still sealed after a full sweep"


def test_a_ranked_offset_list_counts_every_match_on_its_first_page(
    settings: Settings, store: Store, world: World
) -> None:
    ranked = settings.model_copy(update={"content_query_mode": "hybrid"})
    agent = world.agent(world.user("Ann", "acme"))
    with TestClient(create_app(ranked, store)) as client:
        for i in range(5):
            put(client, agent, f"green tea note {i}")
        pages = [
            client.get(
                "/api/v1/agent/memories",
                params={"content_query": "green", "page": page, "page_size": 2},
                headers=agent.headers,
            )
            for page in (1, 2, 3)
        ]
    for response in pages:
        assert response.status_code == 200, response.text
    assert sum(len(response.json()["data"]) for response in pages) == 5  # every match is served
    metas = [response.json()["meta"] for response in pages]
    # ... and every page tells the same count (docs/search.md: "total_count is how many of
    # those there are"), so a client that pages by total_pages reaches page 3.
    assert [(meta["total_count"], meta["total_pages"]) for meta in metas] == [(5, 3)] * 3


def test_a_refused_status_names_every_value_the_filter_takes(
    client: TestClient, world: World
) -> None:
    agent = world.agent(world.user("Ann", "acme"))
    response = client.get(SEARCH, params={"query": "tea", "status": "bogus"}, headers=agent.headers)
    assert response.status_code == 422, response.text
    assert "all" in response.json()["error"]["details"]["status"]


@pytest.mark.parametrize("limit", [True, "3"])
def test_mcp_refuses_a_limit_that_is_not_an_integer(
    settings: Settings, store: Store, world: World, limit: object
) -> None:
    from tests.api.test_mcp import HEADERS, call

    agent = world.agent(world.user("Sal", "mcp"))
    headers = {**HEADERS, **agent.headers}
    with TestClient(create_app(settings, store)) as client:
        answer = client.post(
            "/mcp", json=call("search_memories", {"query": "x", "limit": limit}), headers=headers
        )
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["isError"] is True, result
    assert result["structuredContent"]["error"]["code"] == "validation_failed"


def test_a_well_formed_request_id_of_any_accepted_length_is_recorded(
    client: TestClient, world: World
) -> None:
    """The middleware keeps an incoming X-Request-ID of up to 128 characters
    (`WELL_FORMED_REQUEST_ID`), and every change records it in `memory_history.request_id`
    (and an erasure in `erasures.request_id`), both `String(64)`: PostgreSQL refuses the row,
    so the store fails with 500 `internal_error` (SQLite does not enforce the length)."""
    ann = world.user("Ann", "acme")
    agent = world.agent(ann)
    long_id = "r" * 100
    headers = {**agent.headers, "X-Request-ID": long_id}
    stored = client.post(
        "/api/v1/agent/memories", json=memory_body("likes green tea"), headers=headers
    )
    assert stored.status_code == 201, stored.text
    assert stored.headers["x-request-id"] == long_id
    memory_id = stored.json()["data"]["id"]
    history = client.get(f"/api/v1/agent/memories/{memory_id}/history", headers=agent.headers)
    assert history.json()["data"][0]["request_id"] == long_id
    erased = client.post(
        "/api/v1/me/memories/erase",
        json={"confirm": True},
        headers={**ann.headers, "X-Request-ID": long_id},
    )
    assert erased.status_code == 200, erased.text


def test_a_search_answers_its_first_page_when_the_kept_answers_file_cannot_be_opened(
    client: TestClient, world: World, settings: Settings
) -> None:
    """sqlite_kept.py: a kept answer "is a cache (lost in a crash, its cursor says
    'expired')". When `<database>.searches` cannot be opened (here: a directory stands at its
    path; in production, a file left by another user, a full or read-only mount), every search
    with more than one page answers 503 `storage_unavailable` "The database is unavailable"
    instead of its first page, though the database is fine (a one-page search works)."""
    if settings.database_url.startswith("sqlite"):
        path = settings.database_url.removeprefix("sqlite:///") + SUFFIX
        os.mkdir(path)
    agent = world.agent(world.user("Ann", "acme"))
    for i in range(3):
        put(client, agent, f"green tea note {i}")
    one_page = client.get(SEARCH, params={"query": "green", "limit": 5}, headers=agent.headers)
    assert one_page.status_code == 200, one_page.text  # nothing to keep: served
    first = client.get(SEARCH, params={"query": "green", "limit": 1}, headers=agent.headers)
    assert first.status_code == 200, first.text
    assert len(first.json()["data"]) == 1


def test_idle_mcp_streams_do_not_take_every_other_callers_slot(tmp_path: Path) -> None:
    from tests.live.conftest import start_server, stop_server

    slots = 2
    server = start_server(
        f"sqlite:///{tmp_path / 'live.db'}",
        tmp_path,
        settings={"MNEMOS_EMBEDDER": "none", "MNEMOS_MAX_IN_FLIGHT": str(slots)},
    )
    try:
        org = server.admin("create-org", "--name", "A")["id"]
        ann = server.admin("create-user", "--name", "Ann", "--email", "a@a.test", "--org", org)
        key = server.admin("create-agent", "--owner", ann["id"], "--name", "A")["api_key"]
        with contextlib.ExitStack() as held, httpx.Client(timeout=30) as http:
            for _ in range(slots):
                stream = held.enter_context(
                    http.stream("GET", f"{server.base_url}/mcp", headers={"X-API-Key": key})
                )
                # It was a text/event-stream that stayed open; there is none to open now.
                assert stream.status_code == 405
            with httpx.Client(timeout=30) as other:
                health = other.get(f"{server.base_url}/healthz")
        assert health.status_code == 200, health.text
    finally:
        stop_server(server)
