"""`Idempotency-Key` on store: a retried request returns the first result, never a duplicate."""

from __future__ import annotations

import threading

from fastapi.testclient import TestClient

from tests.api.test_band_agent import BASE, error, listed
from tests.world import World, memory_body


def test_retries_return_the_first_memory(client: TestClient, world: World) -> None:
    agent = world.agent(world.user("Ida", "idem"))
    headers = {**agent.headers, "Idempotency-Key": "req-001"}
    first = client.post(BASE, json=memory_body("once"), headers=headers)
    again = client.post(BASE, json=memory_body("once"), headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert listed(client, agent) == ["once"]
    other = client.post(
        BASE, json=memory_body("once"), headers={**agent.headers, "Idempotency-Key": "req-002"}
    )
    assert other.json()["data"]["id"] != first.json()["data"]["id"]
    body = error(client.post(BASE, json=memory_body("different"), headers=headers), 409, "conflict")
    assert body["details"] == {"idempotency_key": "reused with a different body"}
    # keys belong to one agent: another agent's identical key stores its own memory
    stranger = world.agent(world.user("Ivo", "idem"))
    theirs = client.post(
        BASE, json=memory_body("once"), headers={**stranger.headers, "Idempotency-Key": "req-001"}
    )
    assert theirs.status_code == 201 and theirs.json()["data"]["id"] != first.json()["data"]["id"]
    for bad in ("", "x" * 256, "tab\tkey"):
        response = client.post(
            BASE, json=memory_body("x"), headers={**agent.headers, "Idempotency-Key": bad}
        )
        assert response.status_code == 422, bad
    assert listed(client, agent) == ["once", "once"]


def test_concurrent_retries_store_once(client: TestClient, world: World) -> None:
    agent = world.agent(world.user("Ike", "idem"))
    headers = {**agent.headers, "Idempotency-Key": "burst"}
    answers: list[str] = []

    def send() -> None:
        response = client.post(BASE, json=memory_body("burst"), headers=headers)
        assert response.status_code == 201
        answers.append(response.json()["data"]["id"])

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(answers)) == 1 and len(answers) == 8
    assert listed(client, agent) == ["burst"]
