"""A search by an embeddings endpoint (`MNEMOS_EMBEDDER=<url>`) has its query embedded before it
runs (`Recall.embedded_first`), on both backends: while the endpoint is slow, the process's
request threads and database connections stay free for everyone else; a failing endpoint
answers in the documented shapes; nothing but an authenticated first page by meaning asks the
endpoint anything."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain.ports import Embedder
from mnemos.embedding import load_embedder
from mnemos.indexer import drain
from mnemos.storage.base import Store
from tests.api.test_mcp import HEADERS as MCP_HEADERS
from tests.api.test_mcp import call
from tests.test_embedding import EmbeddingsServer, good_answer
from tests.test_recall import AISLE, acme, put  # noqa: F401
from tests.world import Actor

QUESTION = "which seat does the client like on planes"
WORDS = "aisle seats"  # a query the keyword leg answers too
OTHERS = ("window seats", "the quarterly report", "a dog called Biscuit")
STORED = {AISLE, *OTHERS}  # every memory's text: anything else the endpoint embeds is a query
WAIT = 10.0  # seconds a step may take before the test calls it stuck (only when it is)


class HeldServer(EmbeddingsServer):
    """An embeddings endpoint that answers memories at once and holds the query's request
    until `release` (or answers it 500 when `failing`)."""

    def __init__(self, failing: bool = False) -> None:
        super().__init__()
        self.asked = threading.Event()  # the query's embedding was asked for
        self.release = threading.Event()
        self.failing = failing
        self.answer = self._answer

    def _answer(self, body: dict[str, Any]) -> tuple[int, bytes]:
        if set(body["input"]) <= STORED:
            return good_answer(body)
        self.asked.set()
        if self.failing:
            return 500, json.dumps({"error": "the model is loading"}).encode()
        self.release.wait(WAIT)
        return good_answer(body)

    def queries(self) -> int:
        return sum(1 for _, _, body in self.requests if not set(body["input"]) <= STORED)


@pytest.fixture
def endpoint() -> Iterator[HeldServer]:
    running = HeldServer()
    yield running
    running.release.set()
    running.close()


@contextmanager
def served(settings: Settings, store: Store, server: HeldServer) -> Iterator[TestClient]:
    """The app with the endpoint as its embedder, one request thread (PostgreSQL's default),
    one memory of the writer stored and embedded."""
    embedder = load_embedder(server.url, model="m", dimensions=8)
    assert embedder is not None
    one_thread = settings.model_copy(update={"worker_threads": 1})
    with TestClient(create_app(one_thread, store, embedder), raise_server_exceptions=False) as c:
        yield c


def stored(client: TestClient, store: Store, embedder: Embedder, writer: Actor) -> str:
    memory_id = put(client, writer, AISLE)
    drain(store, embedder)
    return memory_id


def in_thread(call: Any) -> tuple[threading.Thread, list[httpx.Response]]:
    answers: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: answers.append(call()), daemon=True)
    thread.start()
    return thread, answers


SLOW = {  # a request whose query the endpoint embeds: the path's end and its parameters
    "search": ("/search", {"query": QUESTION, "mode": "semantic"}),
    "ranked list": ("", {"content_query": QUESTION}),  # MNEMOS_CONTENT_QUERY_MODE=hybrid
}
SLOW_TOOLS = {  # the MCP tools whose query the endpoint embeds, and their arguments
    "search_memories": {"query": QUESTION},
    "list_memories": {"content_query": QUESTION},  # MNEMOS_CONTENT_QUERY_MODE=hybrid
}


def slow_call(client: TestClient, who: Actor, human: bool, slow: str) -> httpx.Response:
    """The request of `test_a_slow_endpoint_holds_no_request_thread`: REST, or an MCP tool."""
    if slow in SLOW_TOOLS:
        return client.post(
            "/mcp", json=call(slow, SLOW_TOOLS[slow]), headers={**MCP_HEADERS, **who.headers}
        )
    path = "/api/v1/me/memories" if human else "/api/v1/agent/memories"
    end, params = SLOW[slow]
    return client.get(path + end, params=params, headers=who.headers)


def found_ids(answer: httpx.Response) -> list[str]:
    body = answer.json()
    if "result" in body:  # an MCP tool's
        assert not body["result"].get("isError"), body
        return [row["id"] for row in body["result"]["structuredContent"]["memories"]]
    return [row["id"] for row in body["data"]]


@pytest.mark.parametrize("slow", [*SLOW, *SLOW_TOOLS])
@pytest.mark.parametrize("human", [False, True], ids=["agent", "human"])
def test_a_slow_endpoint_holds_no_request_thread(
    settings: Settings,
    store: Store,
    acme: dict[str, Actor],  # noqa: F811
    endpoint: HeldServer,
    human: bool,
    slow: str,
) -> None:
    """While the endpoint holds a search's (or a ranked list's) query, a plain list by the same
    process answers (it waited behind the search on the process's one request thread before),
    and the search answers once the endpoint does; through REST and MCP's tools (a person has
    no search tool)."""
    if human and slow == "search_memories":
        pytest.skip("a person's key has no search_memories tool")
    writer, ann = acme["writer"], acme["ann"]
    ranked = settings.model_copy(update={"content_query_mode": "hybrid"})
    with served(ranked, store, endpoint) as client:
        embedder = client.app.state.services.memories.recall.embedder  # type: ignore[attr-defined]
        aisle = stored(client, store, embedder, writer)
        who = ann if human else writer
        path = "/api/v1/me/memories" if human else "/api/v1/agent/memories"
        searching, searched = in_thread(lambda: slow_call(client, who, human, slow))
        listing = None
        try:
            assert endpoint.asked.wait(WAIT)
            listing, listed = in_thread(lambda: client.get(path, headers=who.headers))
            listing.join(WAIT)
            assert listed and listed[0].status_code == 200  # while the search still waits
            assert searching.is_alive()
        finally:
            endpoint.release.set()  # whatever failed: both requests end before the app stops
            searching.join(WAIT)
            if listing is not None:
                listing.join(WAIT)
    assert searched and searched[0].status_code == 200, searched
    assert found_ids(searched[0]) == [aisle]
    assert endpoint.queries() == 1


def test_a_failing_endpoint_answers_as_documented(
    settings: Settings,
    store: Store,
    acme: dict[str, Actor],  # noqa: F811
) -> None:
    """Embedded first, a failing endpoint is still a 503 `embedder_unavailable` for a semantic
    search, and a hybrid search answers by keyword, saying why in `meta`."""
    failing = HeldServer(failing=True)
    try:
        with served(settings, store, failing) as client:
            embedder = client.app.state.services.memories.recall.embedder  # type: ignore[attr-defined]
            aisle = stored(client, store, embedder, acme["writer"])
            path = "/api/v1/agent/memories/search"
            headers = acme["writer"].headers
            semantic = client.get(
                path, params={"query": QUESTION, "mode": "semantic"}, headers=headers
            )
            hybrid = client.get(path, params={"query": WORDS}, headers=headers)
    finally:
        failing.close()
    assert semantic.status_code == 503, semantic.text
    assert semantic.json()["error"]["code"] == "embedder_unavailable"
    assert hybrid.status_code == 200, hybrid.text
    body = hybrid.json()
    assert body["meta"]["mode"] == "keyword"
    assert body["meta"]["fallback"] == "embedder_unavailable"
    assert [row["id"] for row in body["data"]] == [aisle]


def test_only_an_authenticated_first_page_by_meaning_asks_the_endpoint(
    settings: Settings,
    store: Store,
    acme: dict[str, Actor],  # noqa: F811
    endpoint: HeldServer,
) -> None:
    endpoint.release.set()
    path = "/api/v1/agent/memories/search"
    headers = acme["writer"].headers
    with served(settings, store, endpoint) as client:
        embedder = client.app.state.services.memories.recall.embedder  # type: ignore[attr-defined]
        stored(client, store, embedder, acme["writer"])
        for text in OTHERS:
            put(client, acme["writer"], text)
        drain(store, embedder)
        refused = client.get(path, params={"query": QUESTION}, headers={"X-API-Key": "nope"})
        keyword = client.get(path, params={"query": QUESTION, "mode": "keyword"}, headers=headers)
        assert (refused.status_code, keyword.status_code) == (401, 200)
        assert endpoint.queries() == 0
        first = client.get(path, params={"query": QUESTION, "limit": 1}, headers=headers)
        assert first.status_code == 200, first.text
        cursor = first.json()["meta"]["next_cursor"]
        assert cursor is not None
        later = client.get(
            path, params={"query": QUESTION, "limit": 1, "cursor": cursor}, headers=headers
        )
        assert later.status_code == 200, later.text
    assert endpoint.queries() == 1  # the first page's, once
