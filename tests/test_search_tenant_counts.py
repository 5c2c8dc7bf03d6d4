"""A refused-looking keyword search counts its terms in the caller's own memories only, for
every audience: also the person's `scope=room` branch of their own agents' memories in their
rooms, which pins no owner column (no SQLite scope token). Thresholds scaled as
`tests/api/test_search_plan.py` scales them; both backends."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from mnemos.storage import postgres, search_plan, sql, sqlite
from mnemos.storage.base import Store
from tests.api.test_band_human import room
from tests.test_review18 import _refresh_statistics, _store_many
from tests.world import Actor, World, agent_memory

ME = "/api/v1/me/memories"


def _in_room(
    store: Store, agent: Actor, room_id: str, contents: list[str], start: datetime
) -> None:
    rows = [
        agent_memory(
            agent,
            text,
            start + timedelta(seconds=i),
            id=uuid.uuid4(),
            chat_room_id=uuid.UUID(room_id),
        )
        for i, text in enumerate(contents)
    ]
    store.replace_memories(agent.tenant, rows, [], datetime.now(UTC))


def test_another_tenants_words_do_not_refuse_a_persons_search_of_their_agents_in_rooms(
    client: TestClient, store: Store, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ann's own agent keeps 150 memories in her room, the oldest naming `marigold`; Globex
    holds the word 1,500 times. Her `scope=room` search walks too few rows to reach it, and the
    word is too common in the whole index: the plan counts it in her audiences. Her agents'
    memories in her rooms are `Audience(room_member_user_id=..., source_agent_owner_id=...)`,
    which SQLite's index cannot narrow by a scope token: counted over the whole index, Globex's
    1,500 made her search 422 `words_too_common` (review18's "branch with no owner pinned")."""
    monkeypatch.setattr(search_plan, "DRIVER_POSTINGS", 1_000)
    monkeypatch.setattr(search_plan, "WALK_EXPECTED_ROWS", 200)
    monkeypatch.setattr(sql, "WALK_ROWS", 100)
    monkeypatch.setattr(sqlite, "DRIVER_POSTINGS", 1_000)
    monkeypatch.setattr(sqlite, "STATS_SECONDS", 0.0)
    monkeypatch.setattr(postgres, "STATS_SECONDS", 0.0)
    ann = world.user("Ann", "Acme")
    bot = world.agent(ann)
    room_id = room(client, bot, ann)
    start = datetime.now(UTC) - timedelta(days=2)
    notes = ["the client likes marigold tea"] + [f"note number {i}" for i in range(149)]
    _in_room(store, bot, room_id, notes, start)
    globex = world.agent(world.user("Gus", "Globex"))
    common = [" ".join(["marigold"] * 8 + ["shipment", str(i)]) for i in range(1_500)]
    _store_many(store, globex, common, start + timedelta(days=1))
    _refresh_statistics(store)

    params = {"scope": "room", "content_query": "marigold"}
    answer = client.get(ME, params=params, headers=ann.headers)
    assert answer.status_code == 200, answer.text
    assert [m["content"] for m in answer.json()["data"]] == ["the client likes marigold tea"]


def test_a_search_common_in_the_persons_own_rooms_is_still_refused(
    client: TestClient, store: Store, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The count is of the caller's own memories: where her own agents hold the word too often
    (and the walk finds too few), the search is refused as before."""
    monkeypatch.setattr(search_plan, "DRIVER_POSTINGS", 1_000)
    monkeypatch.setattr(search_plan, "WALK_EXPECTED_ROWS", 200)
    monkeypatch.setattr(sql, "WALK_ROWS", 100)
    monkeypatch.setattr(sqlite, "DRIVER_POSTINGS", 1_000)
    monkeypatch.setattr(sqlite, "STATS_SECONDS", 0.0)
    monkeypatch.setattr(postgres, "STATS_SECONDS", 0.0)
    ann = world.user("Ann", "Acme")
    bot = world.agent(ann)
    room_id = room(client, bot, ann)
    start = datetime.now(UTC) - timedelta(days=2)
    rarely = [" ".join(["babab"] * 8 + [str(i)]) for i in range(1_500)]
    rarely += [" ".join(["babag"] * 8 + [str(i)]) for i in range(1_500)]
    _in_room(store, bot, room_id, rarely, start)
    _refresh_statistics(store)

    params = {"scope": "room", "content_query": "babab babag"}
    answer = client.get(ME, params=params, headers=ann.headers)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["details"]["reason"] == "words_too_common"
