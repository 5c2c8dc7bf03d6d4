"""`content_query` is real full-text search, with the same meaning on every backend."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.test_band_agent import BASE, error, listed, store
from tests.world import Actor, World

TEXTS = [
    "Customer prefers SUV models for family trips",
    "Every retry loop has a maximum attempt count",
    "Backoff delays include random jitter",
    "The preferred SUV colour is dark green",
    "Green tea in the morning, never coffee",
    "Café au lait on Sundays",
]


@pytest.fixture
def agent(client: TestClient, world: World) -> Actor:
    agent = world.agent(world.user("Sam", "search"))
    for text in TEXTS:
        store(client, agent, text, scope="organization")
    return agent


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("prefers SUV", [0]),
        ("SUV prefers", [0]),
        ("suv", [3, 0]),
        ("PREF", [3, 0]),
        ("pref suv green", [3]),
        ('"random jitter"', [2]),
        ('"jitter random"', []),
        ('"dark green" suv', [3]),
        ("green", [4, 3]),
        ("retr loo", [1]),
        ("nothing-matches-this", []),
        ("tea, coffee!", [4]),
        ("cafe", [5]),
        ('NOT OR AND "NEAR" * ^ - :', []),
        ("max* (attempt)", [1]),
        # SQLite indexes scope tokens (zzag<hex>, zzorg<hex>) beside the words: never a match.
        ("zz", []),
        ("zzag", []),
        ("zzorg", []),
    ],
)
def test_search_semantics(
    client: TestClient, agent: Actor, query: str, expected: list[int]
) -> None:
    found = listed(client, agent, content_query=query)
    assert found == [TEXTS[i] for i in expected]


def test_search_combines_with_scope_status_and_pages(client: TestClient, agent: Actor) -> None:
    assert listed(client, agent, content_query="green", memory_scope="org") == [TEXTS[4], TEXTS[3]]
    assert listed(client, agent, content_query="green", scope="agent") == []
    body = client.get(
        BASE, params={"content_query": "green", "limit": 1}, headers=agent.headers
    ).json()
    assert [r["content"] for r in body["data"]] == [TEXTS[4]]
    rest = client.get(
        BASE,
        params={"content_query": "green", "limit": 1, "cursor": body["meta"]["next_cursor"]},
        headers=agent.headers,
    ).json()
    assert [r["content"] for r in rest["data"]] == [TEXTS[3]]
    assert rest["meta"]["has_more"] is False


@pytest.mark.usefixtures("agent")
def test_search_never_sees_other_tenants(client: TestClient, world: World) -> None:
    outsider = world.agent(world.user("Oz", "elsewhere"))
    assert listed(client, outsider, content_query="green", memory_scope="org") == []
    assert listed(client, outsider, content_query="green") == []


@pytest.mark.parametrize("query", ["", "***", '""', "&|!", "x" * 501])
def test_unsearchable_queries_are_422(client: TestClient, agent: Actor, query: str) -> None:
    body = error(
        client.get(BASE, params={"content_query": query}, headers=agent.headers),
        422,
        "validation_failed",
    )
    assert "content_query" in body["details"]


def test_search_follows_status(client: TestClient, agent: Actor) -> None:
    target = client.get(BASE, params={"content_query": "jitter"}, headers=agent.headers).json()[
        "data"
    ][0]
    client.post(f"{BASE}/{target['id']}/supersede", headers=agent.headers)
    assert listed(client, agent, content_query="jitter") == []
    assert listed(client, agent, content_query="jitter", status="superseded") == [TEXTS[2]]


def test_scope_tokens_are_not_words(client: TestClient, agent: Actor) -> None:
    assert agent.organization_id is not None
    for token in (f"zzag{agent.id}", f"zzorg{agent.organization_id}"):
        token = token.replace("-", "")
        assert listed(client, agent, content_query=token, memory_scope="org") == []
        assert listed(client, agent, content_query=token) == []


def test_search_follows_owner_changes(client: TestClient, world: World) -> None:
    """Deleting an agent clears the source of its organization memories: still found org-wide."""
    owner = world.user("Ola", "owners")
    leaving, staying = world.agent(owner, "Leaving"), world.agent(owner, "Staying")
    store(client, leaving, "Quarterly harbor inspection is on Fridays", scope="organization")
    store(client, leaving, "Private harbor note", scope="agent")
    assert listed(client, staying, content_query="harbor", memory_scope="org") == [
        "Quarterly harbor inspection is on Fridays"
    ]
    gone = client.delete(f"/api/v1/me/agents/{leaving.id}", headers=owner.headers)
    assert gone.status_code in (200, 204), gone.text
    assert listed(client, staying, content_query="harbor", memory_scope="org") == [
        "Quarterly harbor inspection is on Fridays"
    ]
    assert listed(client, staying, content_query="private") == []
