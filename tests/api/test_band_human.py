"""The Band human API through an ASGI client, on every backend."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.storage.base import Store
from tests.api.test_band_agent import BASE as AGENT_BASE
from tests.api.test_band_agent import error, store
from tests.world import Actor, World

ME = "/api/v1/me/memories"


def room(client: TestClient, owner: Actor, *members: Actor, title: str = "Room") -> str:
    created = client.post(
        "/api/v1/agent/chats", json={"chat": {"title": title}}, headers=owner.headers
    )
    assert created.status_code == 201, created.text
    room_id: str = created.json()["data"]["id"]
    for member in members:
        added = client.post(
            f"/api/v1/agent/chats/{room_id}/participants",
            json={"participant": {"participant_id": member.id}},
            headers=owner.headers,
        )
        assert added.status_code == 201, added.text
    return room_id


def seen(client: TestClient, person: Actor, **params: Any) -> list[str]:
    response = client.get(ME, params=params, headers=person.headers)
    assert response.status_code == 200, response.text
    return [row["content"] for row in response.json()["data"]]


@pytest.fixture
def cast(client: TestClient, world: World) -> dict[str, Any]:
    ann, bob = world.user("Ann", "acme"), world.user("Bob", "acme")
    eve = world.user("Eve", "globex")
    a1, b1, e1 = (
        world.agent(ann, "Ann Bot"),
        world.agent(bob, "Bob Bot"),
        world.agent(eve, "Eve Bot"),
    )
    shared = room(client, a1, ann, b1, title="Shared")
    memories = {
        "about ann by bob's bot": store(client, b1, "about ann by bob's bot", subject_id=ann.id),
        "about ann by eve's bot": store(client, e1, "about ann by eve's bot", subject_id=ann.id),
        "acme org": store(client, b1, "acme org", scope="organization"),
        "globex org": store(client, e1, "globex org", scope="organization"),
        "ann bot private": store(client, a1, "ann bot private"),
        "bob bot private": store(client, b1, "bob bot private"),
        "room subject about bob": store(
            client, b1, "room subject about bob", subject_id=bob.id, chat_room_id=shared
        ),
        "room private of bob bot": store(
            client, b1, "room private of bob bot", chat_room_id=shared
        ),
        "room private of ann bot": store(
            client, a1, "room private of ann bot", chat_room_id=shared
        ),
    }
    return {
        "ann": ann,
        "bob": bob,
        "eve": eve,
        "a1": a1,
        "b1": b1,
        "e1": e1,
        "room": shared,
        "m": memories,
    }


def test_scopes(client: TestClient, cast: dict[str, Any]) -> None:
    ann = cast["ann"]
    assert seen(client, ann, scope="about_me") == [
        "about ann by eve's bot",
        "about ann by bob's bot",
    ]
    assert seen(client, ann, scope="organization") == ["acme org"]
    assert seen(client, ann, scope="room") == [
        "room private of ann bot",
        "room subject about bob",
    ]
    assert seen(client, ann, scope="room", chat_room_id=cast["room"]) == seen(
        client, ann, scope="room"
    )
    assert seen(client, ann) == [
        "room private of ann bot",
        "room subject about bob",
        "ann bot private",
        "acme org",
        "about ann by eve's bot",
        "about ann by bob's bot",
    ]
    assert seen(client, ann, source_agent_id=cast["b1"].id) == [
        "room subject about bob",
        "acme org",
        "about ann by bob's bot",
    ]
    assert seen(client, cast["eve"]) == ["globex org"]
    body = error(
        client.get(ME, params={"scope": "mine"}, headers=ann.headers), 422, "validation_failed"
    )
    assert "scope" in body["details"]


def test_display_fields(client: TestClient, cast: dict[str, Any]) -> None:
    rows = {r["content"]: r for r in client.get(ME, headers=cast["ann"].headers).json()["data"]}
    by_bob = rows["about ann by bob's bot"]
    assert (by_bob["subject_name"], by_bob["subject_type"], by_bob["source_agent_name"]) == (
        "Ann",
        "user",
        "Bob Bot",
    )
    by_eve = rows["about ann by eve's bot"]
    assert by_eve["source_agent_id"] == cast["e1"].id
    assert by_eve["source_agent_name"] is None  # another organization's agent is not shown by name
    in_room = rows["room subject about bob"]
    assert (in_room["chat_room_title"], in_room["chat_room_status"], in_room["chat_room_type"]) == (
        "Shared",
        "active",
        "group",
    )
    assert in_room["subject_name"] == "Bob"
    assert rows["acme org"]["subject_name"] is None and rows["acme org"]["chat_room_title"] is None


def reads_during(store: Store, call: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows a call returned, and every SQL statement it sent to the read engine."""
    statements: list[str] = []

    def listener(*args: Any) -> None:
        statements.append(args[2])

    engine = store._read_engine  # type: ignore[attr-defined]
    sa.event.listen(engine, "before_cursor_execute", listener)
    try:
        rows: list[dict[str, Any]] = call().json()["data"]
    finally:
        sa.event.remove(engine, "before_cursor_execute", listener)
    return rows, statements


def test_display_fields_take_a_fixed_number_of_queries(
    client: TestClient, world: World, store: Store, cast: dict[str, Any]
) -> None:
    ann = cast["ann"]
    counts = []
    for extra in (0, 25):
        for i in range(extra):
            bot = world.agent(cast["bob"], f"Helper {i}")
            room(client, bot, ann, title=f"R{i}")
            store_in = client.get("/api/v1/agent/chats", headers=bot.headers).json()["data"][0][
                "id"
            ]
            client.post(
                AGENT_BASE,
                json={
                    "memory": {
                        "content": f"x{i}",
                        "system": "long_term",
                        "type": "semantic",
                        "segment": "user",
                        "thought": "t",
                        "subject_id": ann.id,
                        "chat_room_id": store_in,
                    }
                },
                headers=bot.headers,
            )
        page, statements = reads_during(
            store, lambda: client.get(ME, params={"limit": 100}, headers=ann.headers)
        )
        assert len(page) >= 6 + extra
        counts.append(len([sql for sql in statements if not sql.startswith("BEGIN")]))
    assert counts[0] == counts[1] <= 8


def test_get_one(client: TestClient, cast: dict[str, Any]) -> None:
    ann, m = cast["ann"], cast["m"]
    for visible in (
        "about ann by eve's bot",
        "acme org",
        "room subject about bob",
        "ann bot private",
    ):
        got = client.get(f"{ME}/{m[visible]['id']}", headers=ann.headers)
        assert got.status_code == 200 and got.json()["data"]["content"] == visible
    for hidden in ("globex org", "bob bot private", "room private of bob bot"):
        error(client.get(f"{ME}/{m[hidden]['id']}", headers=ann.headers), 403, "forbidden")
    error(client.get(f"{ME}/{uuid.uuid4()}", headers=ann.headers), 404, "not_found")
    error(client.get(f"{ME}/not-a-uuid", headers=ann.headers), 404, "not_found")


def test_changes_allowed_only_on_about_me_and_own_agents(
    client: TestClient, cast: dict[str, Any]
) -> None:
    ann, m = cast["ann"], cast["m"]
    for name in ("acme org", "room subject about bob", "globex org", "bob bot private"):
        for action in ("supersede", "archive", "restore"):
            error(
                client.post(f"{ME}/{m[name]['id']}/{action}", headers=ann.headers), 403, "forbidden"
            )
        error(client.delete(f"{ME}/{m[name]['id']}", headers=ann.headers), 403, "forbidden")
    about = m["about ann by eve's bot"]["id"]
    error(client.post(f"{ME}/{about}/restore", headers=ann.headers), 422, "memory_not_archived")
    assert (
        client.post(f"{ME}/{about}/archive", headers=ann.headers).json()["data"]["status"]
        == "archived"
    )
    assert "about ann by eve's bot" not in seen(client, ann)
    assert seen(client, ann, status="archived") == ["about ann by eve's bot"]
    assert (
        client.post(f"{ME}/{about}/restore", headers=ann.headers).json()["data"]["status"]
        == "active"
    )
    private = m["ann bot private"]["id"]
    assert (
        client.post(f"{ME}/{private}/supersede", headers=ann.headers).json()["data"]["status"]
        == "superseded"
    )
    error(client.post(f"{ME}/{private}/restore", headers=ann.headers), 422, "memory_not_archived")
    deleted = client.delete(f"{ME}/{about}", headers=ann.headers)
    assert deleted.status_code == 204 and deleted.content == b""
    error(client.get(f"{ME}/{about}", headers=ann.headers), 404, "not_found")
    error(client.get(f"{AGENT_BASE}/{about}", headers=cast["e1"].headers), 404, "not_found")


def test_agents_register_list_delete(client: TestClient, cast: dict[str, Any]) -> None:
    ann, m = cast["ann"], cast["m"]
    created = client.post(
        "/api/v1/me/agents/register",
        json={"agent": {"name": "New", "description": "d"}},
        headers=ann.headers,
    )
    assert created.status_code == 201
    key = created.json()["data"]["credentials"]["api_key"]
    new_id = created.json()["data"]["agent"]["id"]
    assert client.get("/api/v1/agent/me", headers={"X-API-Key": key}).json()["data"]["id"] == new_id
    names = [a["name"] for a in client.get("/api/v1/me/agents", headers=ann.headers).json()["data"]]
    assert names == ["Ann Bot", "New"]
    a1 = cast["a1"]
    error(
        client.delete(f"/api/v1/me/agents/{a1.id}", headers=cast["bob"].headers), 404, "not_found"
    )
    gone = client.delete(f"/api/v1/me/agents/{a1.id}", headers=ann.headers)
    assert gone.status_code == 200 and gone.json()["data"]["name"] == "Ann Bot"
    error(client.get(AGENT_BASE, headers=a1.headers), 401, "unauthorized")
    assert "ann bot private" not in seen(client, ann, status="all")
    assert "room private of ann bot" not in seen(client, ann, status="all")
    error(client.get(f"{ME}/{m['ann bot private']['id']}", headers=ann.headers), 404, "not_found")
    register_bad = client.post(
        "/api/v1/me/agents/register", json={"agent": {"name": ""}}, headers=ann.headers
    )
    error(register_bad, 422, "validation_failed")


def test_deleted_agent_memories_outlive_it(
    client: TestClient, world: World, cast: dict[str, Any]
) -> None:
    bob = cast["bob"]
    shared = cast["m"]["acme org"]["id"]
    client.delete(f"/api/v1/me/agents/{cast['b1'].id}", headers=bob.headers)
    kept = client.get(f"{ME}/{shared}", headers=cast["ann"].headers).json()["data"]
    assert kept["source_agent_id"] is None and kept["source_agent_name"] is None
    other = world.agent(bob, "Bob Bot 2")
    assert client.get(f"{AGENT_BASE}/{shared}", headers=other.headers).status_code == 200


def test_profile_and_auth(client: TestClient, cast: dict[str, Any]) -> None:
    ann = cast["ann"]
    profile = client.get("/api/v1/me/profile", headers=ann.headers).json()["data"]
    assert profile["id"] == ann.id and profile["organization_id"] == ann.organization_id
    error(client.get(ME), 401, "unauthorized")
    error(client.get(ME, headers=cast["a1"].headers), 401, "unauthorized")
    error(client.get(ME, headers={"Authorization": "Bearer nonsense"}), 401, "unauthorized")


def test_plan_gating(client: TestClient, world: World, cast: dict[str, Any]) -> None:
    world.store.set_memory_enabled("user", uuid.UUID(cast["ann"].id), False)
    error(client.get(ME, headers=cast["ann"].headers), 403, "plan_required")
    assert client.get("/api/v1/me/profile", headers=cast["ann"].headers).status_code == 200
    assert client.get(ME, headers=cast["bob"].headers).status_code == 200
