"""Races left open by the ninth to eleventh reviews (helper "fixrace20", docs/decisions.md).

Each test forces one interleaving: a hook runs the other request (its own thread and
connection) at the point where the two race, never a sleep that hopes for an order."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain import accounts
from mnemos.domain import tuya as tuya_domain
from mnemos.domain.history import SERVER
from mnemos.domain.ids import utcnow
from mnemos.domain.models import RetentionPolicy, Status, System
from mnemos.domain.tuya_auth import TuyaCaller
from mnemos.storage import sql_rights
from mnemos.storage.base import Store
from mnemos.storage.rows import memory_values
from mnemos.storage.schema import idempotency_keys, memories, memory_history
from mnemos.storage.sql import INSERT_MEMORY
from tests.api.test_band_agent import error
from tests.api.test_tuya_hardening import Tuya, entry, project, signed  # noqa: F401
from tests.test_review17 import (
    meanwhile,
    meanwhile_or_waiting,
    on_postgres_only,
    store_url,
    waits_for_a_lock,
)
from tests.world import Actor, World, agent_memory, memory_body

BASE = "/api/v1/agent/memories"


@pytest.fixture
def client(settings: Settings, store: Store) -> Iterator[TestClient]:
    """The app with request threads to spare: a hook runs a second request while the first
    holds its thread."""
    with TestClient(create_app(settings.model_copy(update={"worker_threads": 8}), store)) as test:
        yield test


def first_call(original: Callable[..., Any], before: Callable[[], Any]) -> Callable[..., Any]:
    """`original`, with `before()` run first on its first call only (the calls `before` makes
    itself, such as the same request's twin, go straight through)."""
    calls: list[bool] = []

    def hooked(*args: Any, **kwargs: Any) -> Any:
        if not calls:
            calls.append(True)
            before()
        return original(*args, **kwargs)

    return hooked


def rows(store: Store, query: sa.Select[Any]) -> list[Any]:
    engine = sa.create_engine(store_url(store))
    try:
        with engine.connect() as conn:
            return list(conn.execute(query).all())
    finally:
        engine.dispose()


# --- 1. two deletions of one agent at once -----------------------------------------------------


def test_the_second_of_two_deletions_of_one_agent_at_once_answers_404(
    client: TestClient, world: World, store: Store
) -> None:
    """Both passed the check that the agent is the person's; the one whose last transaction
    finds the agent gone answers as a deletion of a missing agent does (404), not 200."""
    ann = world.user("Ann", "Acme")
    bot = world.agent(ann)
    agent_url = f"/api/v1/me/agents/{bot.id}"
    other: list[Any] = []

    def delete_it_too() -> None:
        other.append(meanwhile(lambda: client.delete(agent_url, headers=ann.headers)))

    # The first deletion, its batches done, just before its last transaction.
    store.delete_agent = first_call(store.delete_agent, delete_it_too)  # type: ignore[method-assign]
    first = client.delete(agent_url, headers=ann.headers)
    assert [answer.status_code for answer in other] == [200], other[0].text
    error(first, 404, "not_found")
    error(client.delete(agent_url, headers=ann.headers), 404, "not_found")


# --- 2. a status change's time -----------------------------------------------------------------


def _times(store: Store, memory_id: uuid.UUID) -> tuple[Any, list[Any]]:
    updated = rows(store, sa.select(memories.c.updated_at).where(memories.c.id == memory_id))
    history = rows(
        store,
        sa.select(memory_history.c.at)
        .where(memory_history.c.memory_id == memory_id)
        .order_by(memory_history.c.pk),
    )
    return updated[0][0], [at for (at,) in history]


def _stored(world: World, store: Store, **fields: Any) -> tuple[Actor, uuid.UUID, Any]:
    ann = world.user("Ann", "Acme")
    bot = world.agent(ann)
    start = utcnow() - timedelta(hours=1)
    memory = agent_memory(bot, "Ann's flight is on Tuesday", at=start, **fields)
    store.replace_memories(bot.tenant, [memory], [], start)
    return bot, memory.id, start


def test_a_status_change_committed_after_a_later_one_leaves_updated_at_where_it_was(
    world: World, store: Store
) -> None:
    """A change takes its time before it waits for the memory's row: the one committed second
    may carry the earlier time. `updated_at` never moves back; the history keeps each change's
    own time. Every path that changes a status: `set_memory_status`, a supersede
    (`replace_memories`)."""
    bot, memory_id, start = _stored(world, store)
    later, earlier = start + timedelta(minutes=20), start + timedelta(minutes=10)
    store.set_memory_status(bot.tenant, memory_id, Status.ARCHIVED, later, by=SERVER)
    changed = store.set_memory_status(bot.tenant, memory_id, Status.ACTIVE, earlier, by=SERVER)
    assert changed is not None and changed.updated_at == later
    store.replace_memories(bot.tenant, [], [memory_id], start + timedelta(minutes=5), by=SERVER)
    assert _times(store, memory_id) == (
        later,
        [start, later, earlier, start + timedelta(minutes=5)],
    )


def test_a_retention_change_after_a_later_one_leaves_updated_at_where_it_was(
    world: World, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention's batches take their time as they begin, too."""
    bot, memory_id, start = _stored(world, store)
    later = start + timedelta(minutes=20)
    store.set_memory_status(bot.tenant, memory_id, Status.ARCHIVED, later, by=SERVER)
    store.set_memory_status(bot.tenant, memory_id, Status.ACTIVE, later, by=SERVER)
    monkeypatch.setattr(sql_rights, "utcnow", lambda: start + timedelta(minutes=10))
    policy = RetentionPolicy(bot.tenant, System.LONG_TERM, 1)
    done = store.expire_memories(policy, utcnow(), 10, SERVER)
    assert done.changed == 1
    updated, history = _times(store, memory_id)
    assert updated == later and history[-1] == start + timedelta(minutes=10)


def test_a_tuya_overwrite_committed_after_a_later_change_leaves_updated_at_where_it_was(
    client: TestClient,
    project: dict[str, Any],  # noqa: F811
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Tuya write supersedes its key's active value at the time it took."""
    tuya = Tuya(client, project)
    assert tuya.write("dev-times", [entry("sofa", "left")])["success"]
    (old_id, inserted), *_ = rows(store, sa.select(memories.c.id, memories.c.inserted_at))
    tenant = project["org"]
    later = inserted + timedelta(minutes=20)
    store.set_memory_status(tenant, old_id, Status.ARCHIVED, later, by=SERVER)
    store.set_memory_status(tenant, old_id, Status.ACTIVE, later, by=SERVER)
    monkeypatch.setattr(tuya_domain, "utcnow", lambda: inserted + timedelta(minutes=10))
    assert tuya.write("dev-times", [entry("sofa", "right")])["success"]
    updated, history = _times(store, old_id)
    assert updated == later and history[-1] == inserted + timedelta(minutes=10)


# --- 3. two refreshes of one Tuya refresh token ------------------------------------------------


def test_a_tuya_refresh_token_refreshes_once_even_twice_at_once(
    client: TestClient,
    project: dict[str, Any],  # noqa: F811
    store: Store,
) -> None:
    """Both refreshes read the refresh token live; the second to replace its pair finds it
    replaced and answers as a used refresh token does (1011 `token invalid`), and only one new
    pair works."""
    headers = signed(project, "GET", "/v1.0/token", {"grant_type": 1}, nonce=uuid.uuid4().hex)
    granted = client.get("/v1.0/token", params={"grant_type": 1}, headers=headers).json()
    path = f"/v1.0/token/{granted['result']['refresh_token']}"

    def refresh() -> dict[str, Any]:
        headers = signed(project, "GET", path, nonce=uuid.uuid4().hex)
        answer: dict[str, Any] = client.get(path, headers=headers).json()
        return answer

    other: list[dict[str, Any]] = []
    # The first refresh, its token read, just before it replaces the pair.
    store.save_tuya_tokens = first_call(  # type: ignore[method-assign]
        store.save_tuya_tokens, lambda: other.append(meanwhile(refresh))
    )
    first = refresh()
    assert other[0]["success"] is True, other
    assert (first["success"], first.get("code")) == (False, 1011), first
    again = refresh()
    assert (again["success"], again.get("code")) == (False, 1011)


# --- 4. a write by an agent that left: a Tuya role, a room ------------------------------------


def test_a_tuya_role_write_by_an_agent_deleted_meanwhile_keeps_nothing(
    client: TestClient,
    world: World,
    project: dict[str, Any],  # noqa: F811
    store: Store,
) -> None:
    """A Tuya write for a role (an agent) read the role before its agent's deletion committed:
    it stores nothing and answers as a write for an unknown role does (1109)."""
    ann = world.user("Ann", "tuya-hardening")  # the project's organization
    bot = world.agent(ann)
    tuya = Tuya(client, project)
    deleted: list[Any] = []

    def delete_the_agent() -> None:
        url = f"/api/v1/me/agents/{bot.id}"
        deleted.append(meanwhile(lambda: client.delete(url, headers=ann.headers)))

    store.put_tuya_memories = first_call(store.put_tuya_memories, delete_the_agent)  # type: ignore[method-assign]
    body = {"bind_role_type": 1, "role_id": bot.id, "memory_list": [entry("sofa", "left", 3)]}
    answer = tuya.call("POST", "dev-role", {}, body)
    assert [d.status_code for d in deleted] == [200]
    assert (answer["success"], answer.get("code")) == (False, 1109), answer
    left = rows(
        store, sa.select(memories.c.id).where(memories.c.source_agent_id == uuid.UUID(bot.id))
    )
    assert left == []


def test_a_store_into_a_room_the_agent_just_left_is_refused(
    client: TestClient, world: World, store: Store
) -> None:
    """The store checked the agent's seat, then the agent left the room (committed before the
    insert): the insert checks the seat itself and the store is refused as a store into a room
    the agent is not in (422 on `chat_room_id`), nothing kept."""
    ann = world.user("Ann", "acme")
    bot = world.agent(ann)
    room = client.post("/api/v1/me/chats", json={"chat": {"title": "Plan"}}, headers=ann.headers)
    room_id = room.json()["data"]["id"]
    chat = f"/api/v1/me/chats/{room_id}/participants"
    added = client.post(chat, json={"participant": {"participant_id": bot.id}}, headers=ann.headers)
    assert added.status_code == 201, added.text
    left: list[Any] = []

    def leave() -> None:
        url = f"/api/v1/agent/chats/{room_id}/participants/{bot.id}"
        left.append(meanwhile(lambda: client.delete(url, headers=bot.headers)))

    store.insert_memory = first_call(store.insert_memory, leave)  # type: ignore[method-assign]
    body = memory_body("the plan is due Friday", scope="organization", chat_room_id=room_id)
    answer = client.post(BASE, json=body, headers=bot.headers)
    assert [d.status_code for d in left] == [200]
    assert "chat_room_id" in error(answer, 422, "validation_failed")["details"]
    kept = rows(
        store, sa.select(memories.c.id).where(memories.c.chat_room_id == uuid.UUID(room_id))
    )
    assert kept == []


def test_a_store_holding_its_seat_makes_leaving_the_room_wait(
    client: TestClient, world: World, store: Store, settings: Settings
) -> None:
    """PostgreSQL: a store's insert holds the agent's seat until the store commits, so the
    agent's leaving waits for it: once the leave answered, no store of the agent into the room
    commits after it (without the lock, the leave did not wait and the store landed after)."""
    on_postgres_only(settings)
    ann = world.user("Ann", "acme")
    bot = world.agent(ann)
    room = client.post("/api/v1/me/chats", json={"chat": {"title": "Plan"}}, headers=ann.headers)
    room_id = uuid.UUID(room.json()["data"]["id"])
    chat = f"/api/v1/me/chats/{room_id}/participants"
    added = client.post(chat, json={"participant": {"participant_id": bot.id}}, headers=ann.headers)
    assert added.status_code == 201, added.text
    memory = agent_memory(bot, "the plan is due Friday", chat_room_id=room_id)
    engine = sa.create_engine(store_url(store))
    try:
        with engine.connect() as storing, storing.begin():  # a store in flight, its insert run
            assert storing.execute(INSERT_MEMORY, memory_values(memory)).first() is not None
            leaving = meanwhile_or_waiting(
                lambda: store.remove_participant(room_id, uuid.UUID(bot.id)), store_url(store)
            )
            waits_for_a_lock(storing)
        assert leaving() is True
    finally:
        engine.dispose()


def test_a_tuya_role_write_holding_its_agent_makes_the_deletion_wait_then_goes_with_it(
    world: World,
    project: dict[str, Any],  # noqa: F811
    store: Store,
    settings: Settings,
) -> None:
    """PostgreSQL: a Tuya role write holds its agent's row until it commits; the agent's
    deletion waits, then deletes the role's memory with the agent's others."""
    on_postgres_only(settings)
    ann = world.user("Ann", "tuya-hardening")
    bot = world.agent(ann)
    _, subject = store.claim_tuya_device("dev-held", project["org"])
    caller = TuyaCaller(project["client_id"], project["org"])
    binding = tuya_domain.Binding(1, uuid.UUID(bot.id))
    written = tuya_domain.Entry("sofa", "sofa", "left", tuya_domain.ROLE)
    now = utcnow()
    memory = tuya_domain._memory(caller, subject, "dev-held", binding, written, now)
    slot = tuya_domain._slot(binding, written)
    engine = sa.create_engine(store_url(store))
    try:
        with engine.connect() as writing, writing.begin():  # a Tuya write in flight
            assert store._put_slots(writing, [(memory, slot)], now, SERVER)  # type: ignore[attr-defined]
            deletion = meanwhile_or_waiting(
                lambda: accounts.delete_owned_agent(store, uuid.UUID(ann.id), uuid.UUID(bot.id)),
                store_url(store),
            )
            waits_for_a_lock(writing)
        deletion()
        left = rows(store, sa.select(memories.c.id))
    finally:
        engine.dispose()
    assert left == []


# --- 5. an idempotency key stored while a person's erasure runs --------------------------------


def test_an_idempotency_key_stored_as_an_erasure_begins_goes_with_its_memory(
    client: TestClient, world: World, store: Store, settings: Settings
) -> None:
    """A store with an `Idempotency-Key` committed after the erasure's first statement and
    before its memories' DELETE: the DELETE erases the memory; its key (a digest of the
    erased request, content included) must go with it, as every erased memory's key does, so
    a retry stores anew (201) as it would after any erasure."""
    on_postgres_only(settings)
    ann = world.user("Ann", "Acme")
    bot = world.agent(ann)
    keyed = {**bot.headers, "Idempotency-Key": "flight-1"}
    body = memory_body("Ann's flight is on Tuesday", subject_id=ann.id)
    stored: list[Any] = []

    def store_with_a_key() -> None:
        stored.append(meanwhile(lambda: client.post(BASE, json=body, headers=keyed)))

    hooked = first_call(store._delete_memories, store_with_a_key)  # type: ignore[attr-defined]
    store._delete_memories = hooked  # type: ignore[attr-defined]
    erased = client.post("/api/v1/me/memories/erase", json={"confirm": True}, headers=ann.headers)
    assert erased.status_code == 200, erased.text
    assert [s.status_code for s in stored] == [201]
    first_id = stored[0].json()["data"]["id"]
    assert rows(store, sa.select(memories.c.id)) == []
    assert rows(store, sa.select(idempotency_keys.c.memory_id)) == []
    again = client.post(BASE, json=body, headers=keyed)
    assert again.status_code == 201, again.text
    assert again.json()["data"]["id"] != first_id
