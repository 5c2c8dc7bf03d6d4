"""Deleting an agent: in batches, then one last transaction that a store of the agent either
commits before or finds no agent after (review17 finding 5, review18 finding 1)."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.domain import accounts
from mnemos.domain.ids import utcnow
from mnemos.domain.models import Scope
from mnemos.storage.base import Store
from mnemos.storage.rows import memory_values
from mnemos.storage.schema import api_keys, memories, memory_history
from mnemos.storage.sql import INSERT_MEMORY
from tests.test_review17 import store_url, waits_for_a_lock
from tests.world import World, agent_memory


def test_a_large_agent_is_deleted_batch_by_batch(
    client: TestClient, world: World, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its key revoked first, then its memories a batch a transaction (private ones deleted,
    the others kept without it, each with its history row), then the agent."""
    ann = world.user("Ann", "Acme")
    bot = world.agent(ann)
    private = [agent_memory(bot, f"private {i}") for i in range(5)]
    shared = [
        agent_memory(bot, f"shared {i}", scope=Scope.ORGANIZATION, organization_id=bot.tenant)
        for i in range(3)
    ]
    store.replace_memories(bot.tenant, private + shared, [], utcnow())
    monkeypatch.setattr(accounts, "AGENT_DELETE_BATCH", 2)
    batches: list[Any] = []
    original = store.part_with_agent_memories

    def counted(*args: Any, **kwargs: Any) -> Any:
        key_revoked = client.get("/api/v1/agent/memories", headers=bot.headers).status_code
        batches.append(key_revoked)
        return original(*args, **kwargs)

    monkeypatch.setattr(store, "part_with_agent_memories", counted)
    answer = client.delete(f"/api/v1/me/agents/{bot.id}", headers=ann.headers)
    assert answer.status_code == 200, answer.text
    assert batches == [401] * 5  # 2, 2, 2, 2 and the last 0 of 8; the key refused throughout

    engine = sa.create_engine(store_url(store))
    try:
        with engine.connect() as conn:
            left = conn.execute(sa.select(memories.c.content, memories.c.source_agent_id)).all()
            events = conn.execute(
                sa.select(memory_history.c.event, sa.func.count()).group_by(memory_history.c.event)
            ).all()
    finally:
        engine.dispose()
    assert sorted(left) == [(f"shared {i}", None) for i in range(3)]
    assert dict(events) == {"created": 8, "deleted": 5, "source_removed": 3}


def test_a_store_holding_its_agent_makes_the_deletion_wait_then_goes_with_it(
    world: World, store: Store, settings: Any
) -> None:
    """PostgreSQL: a store's insert holds its agent's row until the store commits; the
    deletion's last transaction locks that row first, so it waits, then deletes the memory
    (without the lock, a store committed during the deletion was kept, owned by nobody)."""
    if settings.database_url.startswith("sqlite"):
        pytest.skip("SQLite writes one at a time: the store cannot be held inside the deletion")
    ann = world.user("Ann", "Acme")
    bot = world.agent(ann)
    engine = sa.create_engine(store_url(store))
    deleted: list[BaseException | None] = []

    def delete() -> None:
        try:
            accounts.delete_owned_agent(store, uuid.UUID(ann.id), uuid.UUID(bot.id))
            deleted.append(None)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            deleted.append(exc)

    try:
        with engine.connect() as storing, storing.begin():  # a store in flight, its insert run
            storing.execute(INSERT_MEMORY, memory_values(agent_memory(bot, "in flight")))
            deletion = threading.Thread(target=delete)
            deletion.start()
            waits_for_a_lock(storing)  # the deletion's last transaction waits for the agent
        deletion.join(20)
        with engine.connect() as conn:
            left = conn.execute(sa.select(sa.func.count()).select_from(memories)).scalar_one()
            live = conn.execute(
                sa.select(sa.func.count()).where(
                    api_keys.c.principal_id == uuid.UUID(bot.id), api_keys.c.revoked_at.is_(None)
                )
            ).scalar_one()
    finally:
        engine.dispose()
    assert deleted == [None]
    assert (left, live) == (0, 0)
