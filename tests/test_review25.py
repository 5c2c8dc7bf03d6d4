"""A hostile review of this session's changes (review25): recall23's ranked routes, min_score and
other-model note, storage23's vector saves, the lead's rate tables and tokenizer.

Each test states the behaviour the finding asks for; each was a strict xfail, failing on the
code before its fix for the finding's reason (docs/decisions.md, "A hostile review of this
session's changes (2026-12-05, helper "review25")").
"""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain.ports import Embedder
from mnemos.embedding import load_embedder
from mnemos.indexer import drain
from mnemos.storage.base import Store
from tests.test_embedding import EmbeddingsServer
from tests.test_recall import (  # noqa: F401 (the session's local embedder)
    AISLE,
    OTHERS,
    QUESTION,
    Renamed,
    embedder,
    put,
)
from tests.world import Actor, World

SEARCH = "/api/v1/agent/memories/search"


def _both_models(store: Store, world: World, settings: Settings, embedder: Embedder) -> Actor:  # noqa: F811
    """One agent's memories, one embedded by another model (`old-model@384`), one by this
    server's: a `mnemos reindex --switch-model` under way, or an agent whose memories were
    embedded before and after a change of embedder."""
    agent = world.agent(world.user("Ann", "mixed"))
    with TestClient(create_app(settings, store, None)) as plain:
        put(plain, agent, AISLE)
    assert drain(store, Renamed(embedder, "old-model@384")) == 1
    with TestClient(create_app(settings, store, None)) as plain:
        put(plain, agent, OTHERS[0])
    assert drain(store, embedder) == 1
    return agent


def _search(client: TestClient, agent: Actor, **params: Any) -> Any:
    return client.get(SEARCH, params=params, headers=agent.headers)


def test_a_filter_that_matches_nothing_is_not_read_as_another_model(
    store: Store,
    world: World,
    settings: Settings,
    embedder: Embedder,  # noqa: F811
) -> None:
    """No memory of the agent is archived: a semantic search of its archived memories finds
    nothing because nothing matches, not because the memories hold another model's vectors
    (this server's model embedded one of them). `Recall._other_model_only` asks the store
    about the audiences' owners alone (`VectorsSql.other_model_vectors`), the filters dropped,
    so any filtered search that finds nothing in a database holding two models is told to run
    `mnemos reindex --switch-model`."""
    agent = _both_models(store, world, settings, embedder)
    with TestClient(create_app(settings, store, embedder)) as client:
        found = _search(client, agent, query="aisle seats", mode="semantic", status="archived")
        assert found.status_code == 200, found.text
        assert found.json()["data"] == []
        assert "note" not in found.json()["meta"], found.json()["meta"]


def test_a_hybrid_search_that_matches_nothing_answers_as_without_the_filter(
    store: Store,
    world: World,
    settings: Settings,
    embedder: Embedder,  # noqa: F811
) -> None:
    """A hybrid query full text cannot take (no letter) is answered by its meaning leg
    (200). With a filter that matches nothing, the meaning leg finds nothing, the misread
    other-model check sends it to `_by_words_alone` (keyword's strict parse) and the same
    request is a 422 `validation_failed` naming `fallback: other_model_indexed`."""
    agent = _both_models(store, world, settings, embedder)
    with TestClient(create_app(settings, store, embedder)) as client:
        unfiltered = _search(client, agent, query="!!! ???", mode="hybrid")
        assert unfiltered.status_code == 200, unfiltered.text
        filtered = _search(client, agent, query="!!! ???", mode="hybrid", status="archived")
        assert filtered.status_code == 200, filtered.text
        assert filtered.json()["data"] == []
        assert "fallback" not in filtered.json()["meta"]


def test_a_hybrid_question_is_not_invalid_while_the_endpoint_is_down(
    store: Store, world: World, settings: Settings
) -> None:
    """`mode=hybrid` (the REST default, and MCP `search_memories`' only mode) with an
    embeddings endpoint that fails: `Recall._hybrid` answers by `_by_words_alone`, keyword's
    strict parse, and a natural question (`QUESTION`, 10 words: full text takes 8) is a 422
    `validation_failed` "must contain at most 8 words" (details `fallback:
    embedder_unavailable`). The request is valid: the same one answers 200 once the endpoint is
    back, and `mode=semantic` says 503 `embedder_unavailable`. A 422 tells a client to change
    its request (no retry), so every agent's question fails until the outage ends and its
    retry policy never fires."""
    server = EmbeddingsServer()
    try:
        remote = load_embedder(server.url, model="m", dimensions=8)
        agent = world.agent(world.user("Ann", "outage"))
        with TestClient(create_app(settings, store, remote)) as client:
            put(client, agent, AISLE)
            answered = _search(client, agent, query=QUESTION, mode="hybrid")
            assert answered.status_code == 200, answered.text  # a valid request
            server.answer = lambda body: (503, b'{"error": {"message": "overloaded"}}')  # noqa: ARG005
            semantic = _search(client, agent, query=QUESTION, mode="semantic")
            assert semantic.status_code == 503, semantic.text
            hybrid = _search(client, agent, query=QUESTION, mode="hybrid")
            assert hybrid.status_code == 503, hybrid.text
            assert hybrid.json()["error"]["code"] == "embedder_unavailable"
    finally:
        server.close()
