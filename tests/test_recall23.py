"""Search and recall leftovers of review22 and fixsearch20 (docs/decisions.md, "Search and recall
leftovers", helper "recall23"), on both backends: a hybrid search whose keyword leg the store
refuses answers by meaning; a hybrid search without its meaning leg answers as keyword does; a
refused caller or a bad parameter costs no embedding; a ranked list refuses a list's cursor;
the similarity floor `min_score`."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain.ids import utcnow
from mnemos.domain.models import Scope
from mnemos.embedding import load_embedder
from mnemos.indexer import drain
from mnemos.storage import open_store
from mnemos.storage.base import Store
from tests.api.test_mcp import HEADERS as MCP_HEADERS
from tests.api.test_mcp import call
from tests.test_embedding import EmbeddingsServer
from tests.test_recall import AISLE, acme, put  # noqa: F401
from tests.world import Actor, World, agent_memory

AGENT_SEARCH = "/api/v1/agent/memories/search"
HUMAN_SEARCH = "/api/v1/me/memories/search"
HEAVY = "budget probe common words across several tables number"
ROWS = 5_000
LONG = "which seat does the client like best when she flies overseas for work"  # 13 words


@pytest.fixture
def endpoint() -> Iterator[EmbeddingsServer]:
    running = EmbeddingsServer()
    yield running
    running.close()


def mcp(client: TestClient, who: Actor, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    response = client.post(
        "/mcp", json=call(tool, arguments), headers={**MCP_HEADERS, **who.headers}
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def error_of(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    return error


# --- 3. a keyword leg the store refuses -----------------------------------------------------


def test_a_hybrid_search_whose_words_the_store_refuses_answers_by_meaning(
    settings: Settings, store: Store, world: World, endpoint: EmbeddingsServer
) -> None:
    """A person's search (never cut to a pool) of a word in 5,000 memories about them runs past
    a 1 ms budget: `mode=keyword` is 422 `search_too_expensive`, and hybrid answers from its
    meaning leg alone, saying so in `meta` (it was that 422 too). On PostgreSQL the person's
    search runs in one transaction (`snapshot`), which the stopped statement must not break."""
    ann = world.user("Ann", "acme")
    writer = world.agent(ann, "Writer")
    assert ann.organization_id is not None
    about = {
        "scope": Scope.SUBJECT,
        "subject_id": uuid.UUID(ann.id),
        "organization_id": uuid.UUID(ann.organization_id),
    }
    start = utcnow() - timedelta(days=1)
    heavy = [
        agent_memory(writer, f"{HEAVY}{i % 97}", start + timedelta(milliseconds=i), **about)
        for i in range(ROWS)
    ]
    store.replace_memories(writer.tenant, heavy, [], utcnow())
    embedder = load_embedder(endpoint.url, model="m", dimensions=8)
    assert embedder is not None
    drain(store, embedder, batch=64)
    tiny = settings.model_copy(update={"search_budget_ms": 1})
    opened = open_store(tiny)
    try:
        with TestClient(create_app(tiny, opened, embedder)) as client:
            params = {"query": "budget probe", "scope": "about_me"}
            keyword = client.get(
                HUMAN_SEARCH, params={**params, "mode": "keyword"}, headers=ann.headers
            )
            hybrid = client.get(HUMAN_SEARCH, params=params, headers=ann.headers)
    finally:
        opened.close()
    error_of(keyword, 422, "search_too_expensive")  # the premise
    assert hybrid.status_code == 200, hybrid.text
    body = hybrid.json()
    assert {k: body["meta"][k] for k in ("mode", "requested_mode", "fallback")} == {
        "mode": "semantic",
        "requested_mode": "hybrid",
        "fallback": "search_too_expensive",
    }
    assert len(body["data"]) == 10
    assert {row["subject_id"] for row in body["data"]} == {ann.id}


# --- 4. hybrid without its meaning leg answers as keyword ----------------------------------


def test_a_long_hybrid_question_without_an_embedder_is_keywords_422(
    settings: Settings,
    store: Store,
    acme: dict[str, Actor],  # noqa: F811
) -> None:
    """Under `MNEMOS_EMBEDDER=none` a question of more than 8 words was 200 with nothing (MCP's
    `search_memories` told the agent nothing was stored); now it is keyword's 422, whose details
    say why meaning did not answer, on REST and MCP."""
    writer = acme["writer"]
    with TestClient(create_app(settings, store, None)) as plain:
        put(plain, writer, AISLE)
        keyword = plain.get(
            AGENT_SEARCH, params={"query": LONG, "mode": "keyword"}, headers=writer.headers
        )
        hybrid = plain.get(AGENT_SEARCH, params={"query": LONG}, headers=writer.headers)
        tool = mcp(plain, writer, "search_memories", {"query": LONG})
        short = plain.get(AGENT_SEARCH, params={"query": "aisle seats"}, headers=writer.headers)
    words = error_of(keyword, 422, "validation_failed")
    refused = error_of(hybrid, 422, "validation_failed")
    assert refused["message"] == words["message"]
    assert refused["details"] == {**words["details"], "fallback": "no embedder"}
    assert tool["isError"] is True
    assert tool["content"][0]["text"].startswith("validation_failed: ")
    assert short.status_code == 200 and len(short.json()["data"]) == 1  # unchanged


def test_a_long_hybrid_question_with_a_failing_endpoint_is_keywords_422(
    settings: Settings,
    store: Store,
    acme: dict[str, Actor],  # noqa: F811
    endpoint: EmbeddingsServer,
) -> None:
    embedder = load_embedder(endpoint.url, model="m", dimensions=8)
    endpoint.answer = lambda body: (500, b'{"error": "down"}')  # noqa: ARG005
    writer = acme["writer"]
    with TestClient(create_app(settings, store, embedder)) as client:
        put(client, writer, AISLE)
        hybrid = client.get(AGENT_SEARCH, params={"query": LONG}, headers=writer.headers)
    refused = error_of(hybrid, 422, "validation_failed")
    assert refused["details"]["fallback"] == "embedder_unavailable"


# --- 1. a refused caller or a bad parameter costs no embedding ------------------------------


def _refused_calls(client: TestClient, agent: Actor, person: Actor) -> list[httpx.Response]:
    """Requests whose query an embedder elsewhere would embed, each refused (422 or 403)."""
    q = {"query": LONG}
    agent_get = {"headers": agent.headers}
    return [
        client.get(AGENT_SEARCH, params={**q, "memory_scope": "nobody"}, **agent_get),
        client.get(
            AGENT_SEARCH, params={**q, "memory_scope": "org", "scope": "subject"}, **agent_get
        ),
        client.get(AGENT_SEARCH, params={**q, "subject_id": "not-a-uuid"}, **agent_get),
        client.get(
            "/api/v1/agent/memories",
            params={"content_query": "aisle seats", "memory_scope": "nobody"},
            **agent_get,
        ),
        client.get(
            "/api/v1/agent/memories",
            params={"content_query": "aisle", "memory_scope": "org", "scope": "subject"},
            **agent_get,
        ),
        client.get(HUMAN_SEARCH, params={**q, "scope": "nobody"}, headers=person.headers),
    ]


def test_a_refused_request_costs_no_embedding(
    settings: Settings,
    store: Store,
    acme: dict[str, Actor],  # noqa: F811
    endpoint: EmbeddingsServer,
) -> None:
    """With `MNEMOS_EMBEDDER=<url>`, a caller without the memory plan or a bad list parameter
    was refused only after the server had the query embedded (a paid call per request): REST
    searches, ranked lists (`MNEMOS_CONTENT_QUERY_MODE=hybrid`), the page's Search and MCP's
    `search_memories` and `list_memories`. Now each is refused first; nothing is stored, so
    every request the endpoint gets is a query's."""
    embedder = load_embedder(endpoint.url, model="m", dimensions=8)
    ranked = settings.model_copy(update={"content_query_mode": "hybrid"})
    writer, ann, bob = acme["writer"], acme["ann"], acme["bob"]
    store.set_memory_enabled("user", uuid.UUID(bob.id), False)
    planless = world_agent = acme["peer"]  # Bob's agent: Bob has no memory plan now
    assert world_agent is planless
    with TestClient(create_app(ranked, store, embedder)) as client:
        answers = _refused_calls(client, writer, ann)
        for who, human in ((planless, False), (bob, True)):
            base = "/api/v1/me/memories" if human else "/api/v1/agent/memories"
            answers.append(
                client.get(base + "/search", params={"query": LONG}, headers=who.headers)
            )
            answers.append(client.get(base, params={"content_query": "aisle"}, headers=who.headers))
        tools = [
            mcp(client, planless, "search_memories", {"query": LONG}),
            mcp(client, planless, "list_memories", {"content_query": "aisle"}),
            mcp(client, bob, "list_memories", {"content_query": "aisle"}),
            mcp(
                client,
                writer,
                "search_memories",
                {"query": LONG, "memory_scope": "org", "scope": "subject"},
            ),
            mcp(client, writer, "search_memories", {"query": LONG, "limit": 0}),
            mcp(client, writer, "list_memories", {"content_query": "aisle", "limit": 0}),
        ]
        from tests.api.test_ui_http import signed_in

        signed_in(client, ann)
        page = client.get("/ui/", params={"q": LONG, "scope": "nobody"})
        with TestClient(create_app(ranked, store, embedder)) as other:
            signed_in(other, bob, lands="/ui/me")
            planless_page = other.get("/ui/", params={"q": LONG})
        assert endpoint.requests == []
        # The control: the same requests, accepted, have their query embedded once each.
        accepted = client.get(AGENT_SEARCH, params={"query": LONG}, headers=writer.headers)
        assert accepted.status_code == 200, accepted.text
        assert len(endpoint.requests) == 1
    assert [a.status_code for a in answers] == [422] * 6 + [403] * 4, [a.text for a in answers]
    assert all(tool["isError"] for tool in tools), tools
    assert tools[0]["content"][0]["text"].startswith("plan_required")
    assert (page.status_code, planless_page.status_code) == (422, 403)


# --- 2. a ranked list given a cursor -------------------------------------------------------


@pytest.mark.parametrize("human", [False, True], ids=["agent", "human"])
def test_a_ranked_list_continues_a_filter_cursor_newest_first(
    settings: Settings,
    store: Store,
    acme: dict[str, Actor],  # noqa: F811
    human: bool,
) -> None:
    """A client paging a `content_query` list in `filter` mode when the server switches to
    `MNEMOS_CONTENT_QUERY_MODE=hybrid` got the ranked first page again for its next cursor
    (and again: it never ended, or read memories twice); now the cursor continues the
    newest-first walk it came from, to its end."""
    writer = acme["writer"]
    who = acme["ann"] if human else writer
    path = "/api/v1/me/memories" if human else "/api/v1/agent/memories"
    contents = [f"seats note {n}: {'seats ' * (5 - n)}" for n in range(5)]  # oldest first
    with TestClient(create_app(settings, store, None)) as filtering:
        stored = [put(filtering, writer, text) for text in contents]
        first = filtering.get(
            path, params={"content_query": "seats", "limit": 2}, headers=who.headers
        ).json()
    newest_first = stored[::-1]
    assert [row["id"] for row in first["data"]] == newest_first[:2]
    ranked = settings.model_copy(update={"content_query_mode": "hybrid"})
    seen = []
    with TestClient(create_app(ranked, store, None)) as client:
        cursor = first["meta"]["next_cursor"]
        while cursor is not None:
            answer = client.get(
                path,
                params={"content_query": "seats", "limit": 2, "cursor": cursor},
                headers=who.headers,
            )
            assert answer.status_code == 200, answer.text
            seen += [row["id"] for row in answer.json()["data"]]
            cursor = answer.json()["meta"]["next_cursor"]
            assert len(seen) <= len(stored)
        best = client.get(path, params={"content_query": "seats"}, headers=who.headers).json()
    assert seen == newest_first[2:]
    # Without a cursor, still the ranked list: one page of every match.
    assert {row["id"] for row in best["data"]} == set(stored)
    assert best["meta"]["has_more"] is False


# --- 5. the similarity floor ---------------------------------------------------------------

UNRELATED = "how far is the moon from the earth in kilometres"


@pytest.fixture
def floored(
    settings: Settings,
    store: Store,
    acme: dict[str, Actor],  # noqa: F811
) -> Iterator[tuple[TestClient, dict[str, str]]]:
    from tests.test_recall import OTHERS

    local = load_embedder("local")
    assert local is not None
    with TestClient(create_app(settings, store, local)) as client:
        ids = {text: put(client, acme["writer"], text) for text in [AISLE, *OTHERS]}
        drain(store, local)
        yield client, ids


def floor_search(client: TestClient, who: Actor, human: bool = False, **params: Any) -> Any:
    return client.get(HUMAN_SEARCH if human else AGENT_SEARCH, params=params, headers=who.headers)


@pytest.mark.parametrize("human", [False, True], ids=["agent", "human"])
def test_min_score_floors_a_search_by_meaning(
    floored: tuple[TestClient, dict[str, str]],
    acme: dict[str, Actor],  # noqa: F811
    human: bool,
) -> None:
    client, ids = floored
    who = acme["ann"] if human else acme["writer"]
    question = "where does the client like to sit on a plane?"
    for mode in ("semantic", "hybrid"):
        near = floor_search(client, who, human, query=question, mode=mode, min_score=0.3)
        assert near.status_code == 200, near.text
        body = near.json()
        assert [row["id"] for row in body["data"]] == [ids[AISLE]]
        assert body["meta"]["min_score"] == 0.3
        far = floor_search(client, who, human, query=UNRELATED, mode=mode, min_score=0.3)
        assert far.status_code == 200 and far.json()["data"] == [], far.text
        unfloored = floor_search(client, who, human, query=UNRELATED, mode=mode).json()
        assert len(unfloored["data"]) == len(ids)  # the nearest, however far
        assert "min_score" not in unfloored["meta"]
    semantic = floor_search(client, who, human, query=question, mode="semantic").json()
    assert semantic["data"][0]["score"] >= 0.3 > semantic["data"][1]["score"]
    # Hybrid floors its meaning leg only: a memory found by its words still counts.
    worded = floor_search(client, who, human, query="Biscuit dog", min_score=0.99).json()
    assert [row["id"] for row in worded["data"]] == [ids[OTHERS_DOG]]


OTHERS_DOG = "The client's dog is called Biscuit and is afraid of thunder."


@pytest.mark.parametrize(
    "params",
    [
        {"min_score": -0.1},
        {"min_score": 1.5},
        {"min_score": "nan"},
        {"min_score": "high"},
        {"min_score": 0.3, "mode": "keyword"},
    ],
)
def test_a_bad_min_score_is_a_clear_422(
    floored: tuple[TestClient, dict[str, str]],
    acme: dict[str, Actor],  # noqa: F811
    params: dict[str, Any],
) -> None:
    client, _ = floored
    answer = floor_search(client, acme["writer"], query="aisle", **params)
    error = error_of(answer, 422, "validation_failed")
    assert "min_score" in error.get("details", {}), error
    tool = mcp(client, acme["writer"], "search_memories", {"query": "aisle", **params})
    if params.get("mode") is None and not isinstance(params["min_score"], str):
        assert tool["isError"] is True
        assert tool["content"][0]["text"].startswith("validation_failed: "), tool


def test_min_score_is_part_of_the_search_its_cursor_continues(
    floored: tuple[TestClient, dict[str, str]],
    acme: dict[str, Actor],  # noqa: F811
) -> None:
    client, ids = floored
    writer = acme["writer"]
    question = "where does the client like to sit on a plane?"
    first = floor_search(client, writer, query=question, mode="semantic", min_score=0.05, limit=1)
    body = first.json()
    cursor = body["meta"]["next_cursor"]
    assert cursor is not None
    other = floor_search(
        client, writer, query=question, mode="semantic", min_score=0.1, limit=1, cursor=cursor
    )
    assert error_of(other, 422, "invalid_pagination")["details"] == {
        "cursor": "belongs to another search"
    }
    none = floor_search(client, writer, query=question, mode="semantic", limit=1, cursor=cursor)
    error_of(none, 422, "invalid_pagination")
    same = floor_search(
        client, writer, query=question, mode="semantic", min_score=0.05, limit=50, cursor=cursor
    ).json()
    assert same["meta"]["min_score"] == 0.05
    assert all(row["score"] >= 0.05 for row in same["data"])
    assert ids[AISLE] not in [row["id"] for row in same["data"]]


def test_mcp_search_memories_takes_min_score(
    floored: tuple[TestClient, dict[str, str]],
    acme: dict[str, Actor],  # noqa: F811
) -> None:
    client, ids = floored
    far = mcp(client, acme["writer"], "search_memories", {"query": UNRELATED, "min_score": 0.3})
    assert far["structuredContent"]["memories"] == [], far
    near = mcp(
        client,
        acme["writer"],
        "search_memories",
        {"query": "where does the client like to sit on a plane?", "min_score": 0.3},
    )
    assert [m["id"] for m in near["structuredContent"]["memories"]] == [ids[AISLE]]


# --- 6. MCP's list_memories parses its filters once ----------------------------------------


@pytest.mark.parametrize("person", [False, True], ids=["agent", "person"])
def test_mcp_list_memories_parses_its_filters_once(
    settings: Settings,
    store: Store,
    acme: dict[str, Actor],  # noqa: F811
    endpoint: EmbeddingsServer,
    monkeypatch: pytest.MonkeyPatch,
    person: bool,
) -> None:
    """With an embeddings endpoint and `MNEMOS_CONTENT_QUERY_MODE=hybrid`, the tool's first hop
    parsed the filters to find the text to embed, and its run parsed them again."""
    from mnemos.mcp import tools

    parsed: list[str | None] = []

    def counted(*args: Any) -> Any:
        parsed.append(args[-1])
        return tools_list_filters(*args)

    tools_list_filters = tools.list_filters
    monkeypatch.setattr(tools, "list_filters", counted)
    embedder = load_embedder(endpoint.url, model="m", dimensions=8)
    ranked = settings.model_copy(update={"content_query_mode": "hybrid"})
    who = acme["ann"] if person else acme["writer"]
    with TestClient(create_app(ranked, store, embedder)) as client:
        put(client, acme["writer"], AISLE)
        result = mcp(client, who, "list_memories", {"content_query": "aisle seats"})
    assert not result.get("isError"), result
    assert parsed == ["aisle seats"]
