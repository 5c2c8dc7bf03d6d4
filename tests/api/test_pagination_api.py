"""Both pagination families through the API: order, no duplicates, no gaps, meta, errors."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.test_band_agent import BASE, error, store
from tests.world import Actor, World


@pytest.fixture
def agent(world: World) -> Actor:
    return world.agent(world.user("Pat", "pag"))


def walk(client: TestClient, agent: Actor, **params: Any) -> list[list[str]]:
    pages: list[list[str]] = []
    cursor = None
    while True:
        query = dict(params, **({"cursor": cursor} if cursor else {}))
        response = client.get(BASE, params=query, headers=agent.headers)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["meta"] == body["metadata"]
        pages.append([row["content"] for row in body["data"]])
        cursor = body["meta"]["next_cursor"]
        assert body["meta"]["has_more"] is (cursor is not None)
        if cursor is None:
            return pages


def test_cursor_pages_cover_everything_once_newest_first(client: TestClient, agent: Actor) -> None:
    contents = [f"m{i:02d}" for i in range(23)]
    for content in contents:
        store(client, agent, content)
    pages = walk(client, agent, limit=5)
    assert [len(page) for page in pages] == [5, 5, 5, 5, 3]
    assert sum(pages, []) == list(reversed(contents))
    default = client.get(BASE, headers=agent.headers).json()
    assert default["meta"] == {
        "has_more": True,
        "limit": 20,
        "next_cursor": default["meta"]["next_cursor"],
    }
    assert len(default["data"]) == 20


def test_exact_multiple_has_no_empty_last_page(client: TestClient, agent: Actor) -> None:
    for i in range(4):
        store(client, agent, f"m{i}")
    assert walk(client, agent, limit=2) == [["m3", "m2"], ["m1", "m0"]]


def test_writes_during_a_walk_do_not_shift_pages(client: TestClient, agent: Actor) -> None:
    for i in range(6):
        store(client, agent, f"m{i}")
    first = client.get(BASE, params={"limit": 3}, headers=agent.headers).json()
    store(client, agent, "new")
    rest = client.get(
        BASE, params={"limit": 3, "cursor": first["meta"]["next_cursor"]}, headers=agent.headers
    ).json()
    assert [r["content"] for r in rest["data"]] == ["m2", "m1", "m0"]


def test_offset_family_with_deprecation_headers(client: TestClient, agent: Actor) -> None:
    for i in range(7):
        store(client, agent, f"m{i}")
    response = client.get(BASE, params={"page": 2, "page_size": 3}, headers=agent.headers)
    body = response.json()
    assert [r["content"] for r in body["data"]] == ["m3", "m2", "m1"]
    assert body["meta"] == {"page": 2, "page_size": 3, "total_count": 7, "total_pages": 3}
    assert body["metadata"] == body["meta"]
    assert response.headers["deprecation"] == "true"
    assert "2026" in response.headers["sunset"]
    beyond = client.get(BASE, params={"page": 9, "page_size": 3}, headers=agent.headers).json()
    assert beyond["data"] == [] and beyond["meta"]["total_count"] == 7
    assert "deprecation" not in client.get(BASE, headers=agent.headers).headers


@pytest.mark.parametrize(
    "params",
    [
        {"limit": 0},
        {"limit": 101},
        {"limit": "lots"},
        {"limit": -1},
        {"page": 0},
        {"page_size": 51},
        {"page": "x"},
        {"page": 1, "limit": 5},
        {"cursor": "abc", "page": 1},
        {"cursor": "abc"},
        {"cursor": "eyJ0IjoiMjAyNC0wMS0xNVQxMDozMDowMFoiLCJpIjoiNTUwZTg0MDAifQ"},
        {"limit": 99999999999999999999999},
    ],
)
def test_bad_pagination(client: TestClient, agent: Actor, params: dict[str, Any]) -> None:
    error(client.get(BASE, params=params, headers=agent.headers), 422, "invalid_pagination")


def test_tampered_cursor(client: TestClient, agent: Actor) -> None:
    for i in range(3):
        store(client, agent, f"m{i}")
    cursor = client.get(BASE, params={"limit": 1}, headers=agent.headers).json()["meta"][
        "next_cursor"
    ]
    payload, signature = cursor.split(".")
    forged = payload[::-1] + "." + signature
    error(
        client.get(BASE, params={"cursor": forged}, headers=agent.headers),
        422,
        "invalid_pagination",
    )
    error(
        client.get(BASE, params={"cursor": cursor[:-4]}, headers=agent.headers),
        422,
        "invalid_pagination",
    )
