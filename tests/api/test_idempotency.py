"""`Idempotency-Key` on store: a retried request returns the first result, never a duplicate."""

from __future__ import annotations

import threading
from datetime import timedelta

import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain.ids import utcnow
from mnemos.storage.base import Store
from mnemos.storage.schema import idempotency_keys
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


def _keys(store: Store) -> set[str]:
    with store._read() as conn:  # type: ignore[attr-defined]
        return {row[0] for row in conn.execute(sa.select(idempotency_keys.c.key))}


def _backdate_key(store: Store, key: str, hours: float) -> None:
    with store._write() as conn:  # type: ignore[attr-defined]
        conn.execute(
            idempotency_keys.update()
            .where(idempotency_keys.c.key == key)
            .values(inserted_at=utcnow() - timedelta(hours=hours))
        )


def test_keys_past_their_day_are_forgotten_by_the_servers_pass(
    settings: Settings, store: Store, world: World
) -> None:
    """A key answers retries for a day; a key never used again was kept for good. The server's
    periodic pass (`RetentionService.sweep`, in batches) forgets every key past its day, of
    every tenant, and keeps the others; a retry after that stores anew, as a late one did."""
    ida = world.agent(world.user("Ida", "idem"))
    ivo = world.agent(world.user("Ivo", "other"))
    small = settings.model_copy(update={"retention_interval_seconds": 0, "retention_batch": 2})
    with TestClient(create_app(small, store)) as client:
        for agent, key in ((ida, "a"), (ida, "b"), (ivo, "c"), (ivo, "d"), (ida, "fresh")):
            headers = {**agent.headers, "Idempotency-Key": key}
            assert client.post(BASE, json=memory_body(key), headers=headers).status_code == 201
        for key in ("a", "b", "c", "d"):
            _backdate_key(store, key, hours=25)
        _backdate_key(store, "fresh", hours=23)
        retention = client.app.state.services.retention  # type: ignore[attr-defined]
        assert retention.sweep() == (0, 4)  # in batches of two: 2, 2, then none
        assert _keys(store) == {"fresh"}
        again = client.post(
            BASE, json=memory_body("a"), headers={**ida.headers, "Idempotency-Key": "a"}
        )
        assert again.status_code == 201
        assert listed(client, ida).count("a") == 2
