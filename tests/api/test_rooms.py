"""Rooms for agents and people: membership decides visibility; invitations stay in the tenant."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.test_band_agent import BASE, error, store
from tests.world import World, memory_body


def test_room_lifecycle_and_tenancy(client: TestClient, world: World) -> None:
    ann, bob, eve = (
        world.user("Ann", "acme"),
        world.user("Bob", "acme"),
        world.user("Eve", "globex"),
    )
    a1, b1, e1 = world.agent(ann), world.agent(bob), world.agent(eve)
    created = client.post(
        "/api/v1/me/chats", json={"chat": {"title": "Plan", "type": "task"}}, headers=ann.headers
    )
    assert created.status_code == 201
    room = created.json()["data"]
    assert (room["title"], room["type"], room["status"]) == ("Plan", "task", "active")
    chat = f"/api/v1/me/chats/{room['id']}"
    for member in (a1, bob):
        assert (
            client.post(
                f"{chat}/participants",
                json={"participant": {"participant_id": member.id}},
                headers=ann.headers,
            ).status_code
            == 201
        )
    # another organization's people and agents cannot be invited, nor can an unknown id
    for outsider in (eve.id, e1.id, "not-an-id"):
        error(
            client.post(
                f"{chat}/participants",
                json={"participant": {"participant_id": outsider}},
                headers=ann.headers,
            ),
            404,
            "not_found",
        )
    error(
        client.post(
            f"{chat}/participants",
            json={"participant": {"participant_id": bob.id}},
            headers=ann.headers,
        ),
        409,
        "conflict",
    )
    members = client.get(f"{chat}/participants", headers=ann.headers).json()["data"]
    assert [(p["type"], p["role"]) for p in members] == [
        ("User", "owner"),
        ("Agent", "member"),
        ("User", "member"),
    ]
    # non-members do not see the room; members may not add others
    error(client.get(chat, headers=eve.headers), 404, "not_found")
    error(client.get(f"/api/v1/agent/chats/{room['id']}", headers=b1.headers), 404, "not_found")
    assert client.get(f"/api/v1/agent/chats/{room['id']}", headers=a1.headers).status_code == 200
    error(
        client.post(
            f"{chat}/participants",
            json={"participant": {"participant_id": b1.id}},
            headers=bob.headers,
        ),
        403,
        "forbidden",
    )
    listed = client.get("/api/v1/agent/chats", headers=a1.headers).json()
    assert [r["id"] for r in listed["data"]] == [room["id"]] and listed["metadata"][
        "total_count"
    ] == 1
    # agents store memories only in rooms they take part in
    ok = client.post(
        BASE, json=memory_body(scope="organization", chat_room_id=room["id"]), headers=a1.headers
    )
    assert ok.status_code == 201 and ok.json()["data"]["chat_room_id"] == room["id"]
    body = error(
        client.post(BASE, json=memory_body(chat_room_id=room["id"]), headers=b1.headers),
        422,
        "validation_failed",
    )
    assert "chat_room_id" in body["details"]
    # leaving: anyone may leave; the owner cannot be removed
    error(client.delete(f"{chat}/participants/{ann.id}", headers=bob.headers), 403, "forbidden")
    assert client.delete(f"{chat}/participants/{bob.id}", headers=bob.headers).status_code == 200
    error(client.get(chat, headers=bob.headers), 404, "not_found")
    assert (
        client.delete(
            f"/api/v1/agent/chats/{room['id']}/participants/{a1.id}", headers=a1.headers
        ).status_code
        == 200
    )
    error(
        client.post(BASE, json=memory_body(chat_room_id=room["id"]), headers=a1.headers),
        422,
        "validation_failed",
    )
    store(client, a1, "still works without a room")


def test_agent_created_room(client: TestClient, world: World) -> None:
    ann = world.user("Ann", "acme")
    bot = world.agent(ann)
    made = client.post("/api/v1/agent/chats", json={"chat": {"title": None}}, headers=bot.headers)
    assert made.status_code == 201 and made.json()["data"]["type"] == "group"
    error(
        client.post("/api/v1/agent/chats", json={"chat": {"type": "party"}}, headers=bot.headers),
        422,
        "validation_failed",
    )
    error(
        client.get("/api/v1/agent/chats", params={"page_size": 0}, headers=bot.headers),
        422,
        "invalid_pagination",
    )
