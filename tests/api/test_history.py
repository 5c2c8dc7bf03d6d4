"""The history of every change, through every API family, on both backends: what, who, which
request, and in the same transaction as the change (a refused change leaves no history)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.domain.ids import utcnow
from mnemos.domain.models import Change, Status
from mnemos.domain.tenants import Tenants
from mnemos.errors import Conflict
from mnemos.storage.base import Store
from mnemos.storage.schema import memories, memory_history
from tests.api.test_tuya_hardening import Tuya, entry, project  # noqa: F401 - a fixture
from tests.world import Actor, World, memory_body

AGENT = "/api/v1/agent/memories"
HUMAN = "/api/v1/me/memories"


def tenant(store: Store, memory_id: uuid.UUID) -> Tenants:
    """The tenant of a memory's history (also of one that is gone)."""
    query = sa.select(memory_history.c.tenant_id).where(memory_history.c.memory_id == memory_id)
    with store._read() as conn:  # type: ignore[attr-defined]
        found = conn.execute(query.limit(1)).scalar()
    return Tenants((found or uuid.UUID(int=0),))  # none left: no history either


def history(store: Store, memory_id: uuid.UUID) -> list[Change]:
    return store.history_of(tenant(store, memory_id), [memory_id])[memory_id]


def events(store: Store, memory_id: str | uuid.UUID) -> list[tuple[str, str, str | None]]:
    """The stored history of a memory (also of one that is gone), oldest first."""
    ident = uuid.UUID(str(memory_id))
    return [(c.event.value, c.by.type.value, c.by.id) for c in history(store, ident)]


def stored(client: TestClient, agent: Actor, **fields: Any) -> dict[str, Any]:
    answer = client.post(AGENT, json=memory_body("a fact", **fields), headers=agent.headers)
    assert answer.status_code == 201, answer.text
    data: dict[str, Any] = answer.json()["data"]
    data["request_id"] = answer.headers["x-request-id"]
    return data


def test_band_agent_and_human_changes_with_actor_and_request(
    client: TestClient, world: World, store: Store
) -> None:
    ann = world.user("Ann", "acme")
    bot = world.agent(ann)
    memory = stored(client, bot, scope="subject", subject_id=ann.id)
    changes = [
        (f"{AGENT}/{memory['id']}/supersede", bot, ("superseded", "agent", bot.id)),
        (f"{HUMAN}/{memory['id']}/archive", ann, ("archived", "user", ann.id)),
        (f"{HUMAN}/{memory['id']}/restore", ann, ("restored", "user", ann.id)),
        (f"{AGENT}/{memory['id']}/archive", bot, ("archived", "agent", bot.id)),
    ]
    request_ids = [memory["request_id"]]
    for url, who, _ in changes:
        answer = client.post(url, headers=who.headers)
        assert answer.status_code == 200, answer.text
        request_ids.append(answer.headers["x-request-id"])

    history = client.get(f"{HUMAN}/{memory['id']}/history", headers=ann.headers)
    assert history.status_code == 200, history.text
    rows = history.json()["data"]
    want = [("created", "agent", bot.id)] + [change for _, _, change in changes]
    assert [(r["event"], r["actor"]["type"], r["actor"]["id"]) for r in rows] == want
    assert [r["request_id"] for r in rows] == request_ids
    assert "content" not in str(rows) and "a fact" not in str(rows)
    agent_view = client.get(f"{AGENT}/{memory['id']}/history", headers=bot.headers).json()
    assert agent_view == history.json()

    assert client.delete(f"{HUMAN}/{memory['id']}", headers=ann.headers).status_code == 204
    assert events(store, memory["id"])[-1] == ("deleted", "user", ann.id)
    gone = client.get(f"{HUMAN}/{memory['id']}/history", headers=ann.headers)
    assert gone.status_code == 404


def test_history_is_visible_exactly_when_the_memory_is(client: TestClient, world: World) -> None:
    ann, bob, eve = world.user("Ann", "acme"), world.user("Bob", "acme"), world.user("Eve", "evil")
    ann_bot, eve_bot = world.agent(ann), world.agent(eve)
    private = stored(client, ann_bot)  # agent scope: Ann (owner) sees it, Bob does not
    for who, want in ((ann, 200), (bob, 403), (eve, 403)):
        answer = client.get(f"{HUMAN}/{private['id']}/history", headers=who.headers)
        assert answer.status_code == want
        got = client.get(f"{HUMAN}/{private['id']}", headers=who.headers).status_code
        assert got == want
    for who, want in ((ann_bot, 200), (eve_bot, 404)):
        answer = client.get(f"{AGENT}/{private['id']}/history", headers=who.headers)
        assert answer.status_code == want
    for unknown in (str(uuid.uuid4()), "not-a-uuid"):
        assert client.get(f"{HUMAN}/{unknown}/history", headers=ann.headers).status_code == 404
        assert client.get(f"{AGENT}/{unknown}/history", headers=ann_bot.headers).status_code == 404
    assert client.get(f"{HUMAN}/{private['id']}/history").status_code == 401


def test_superagent_delete_and_agent_deletion(
    client: TestClient, world: World, store: Store
) -> None:
    ann = world.user("Ann", "acme")
    bot = world.agent(ann)
    about_ann = stored(client, bot, scope="subject", subject_id=ann.id)
    kept = stored(client, bot, scope="organization")
    private = stored(client, bot)
    answer = client.delete(
        f"/api/agents/{bot.id}/memory/{about_ann['id']}", headers={"api_key": ann.api_key}
    )
    assert answer.status_code == 204
    assert events(store, about_ann["id"])[-1] == ("deleted", "user", ann.id)

    assert client.delete(f"/api/v1/me/agents/{bot.id}", headers=ann.headers).status_code == 200
    created = ("created", "agent", bot.id)
    assert events(store, private["id"]) == [created, ("deleted", "user", ann.id)]
    assert events(store, kept["id"]) == [created, ("source_removed", "user", ann.id)]
    shown = client.get(f"{HUMAN}/{kept['id']}/history", headers=ann.headers).json()["data"]
    assert [row["event"] for row in shown] == ["created", "source_removed"]


def _tuya_ids(store: Store, key: str) -> dict[str, uuid.UUID]:
    """Value -> id of the Tuya memories of a key."""
    with store._read() as conn:  # type: ignore[attr-defined]
        rows = conn.execute(
            sa.select(memories.c.content, memories.c.id).where(memories.c.tuya_slot.like(f"%{key}"))
        ).all()
    return {str(content): ident for content, ident in rows}


def test_tuya_overwrite_delete_and_clear(
    client: TestClient,
    store: Store,
    project: dict[str, Any],  # noqa: F811 - the imported fixture
) -> None:
    tuya = Tuya(client, project)
    by = ("tuya", project["client_id"])
    assert tuya.write("dev1", [entry("age", "30"), entry("city", "Oslo")])["success"]
    assert tuya.write("dev1", [entry("age", "31")])["success"]
    ages = _tuya_ids(store, "age")
    assert events(store, ages["30"]) == [("created", *by), ("superseded", *by)]
    (superseded,) = [c for c in history(store, ages["30"]) if c.superseded_by]
    assert superseded.superseded_by == ages["31"]

    deleted = tuya.call("DELETE", "dev1", {"bind_role_type": 2, "memory_keys": "age"})
    assert deleted["success"] is True
    assert events(store, ages["30"])[-1] == ("deleted", *by)
    assert events(store, ages["31"]) == [("created", *by), ("deleted", *by)]

    city = _tuya_ids(store, "city")["Oslo"]
    cleared = tuya.call("DELETE", "dev1", {"bind_role_type": 2, "clear_all_memory": "true"})
    assert cleared["success"] is True
    assert events(store, city) == [("created", *by), ("deleted", *by)]


def test_a_refused_change_leaves_no_history(
    client: TestClient,
    store: Store,
    project: dict[str, Any],  # noqa: F811 - the imported fixture
) -> None:
    tuya = Tuya(client, project)
    assert tuya.write("dev1", [entry("k", "old")])["success"]
    old = _tuya_ids(store, "k")["old"]
    org = project["org"]
    store.set_memory_status(org, old, Status.ARCHIVED, utcnow())
    assert tuya.write("dev1", [entry("k", "new")])["success"]
    before = events(store, old)
    with pytest.raises(Conflict):  # a second active value of the key: the change rolls back
        store.set_memory_status(org, old, Status.ACTIVE, utcnow())
    assert events(store, old) == before
    with store._read() as conn:  # type: ignore[attr-defined]
        restored = conn.execute(
            sa.select(sa.func.count()).where(
                memory_history.c.memory_id == old, memory_history.c.event == "restored"
            )
        ).scalar_one()
    assert restored == 0


def test_erasure_leaves_no_history_and_no_content(
    client: TestClient, world: World, store: Store
) -> None:
    ann = world.user("Ann", "acme")
    bot = world.agent(ann)
    memory = stored(client, bot, scope="subject", subject_id=ann.id)
    client.post(f"{HUMAN}/{memory['id']}/archive", headers=ann.headers)
    deleted_earlier = stored(client, bot, scope="subject", subject_id=ann.id)
    client.delete(f"{HUMAN}/{deleted_earlier['id']}", headers=ann.headers)
    erased = client.post(f"{HUMAN}/erase", json={"confirm": True}, headers=ann.headers)
    assert erased.json()["data"]["erased"] == 1
    assert events(store, memory["id"]) == []
    assert events(store, deleted_earlier["id"]) == []
    (erasure,) = store.erasures_of(uuid.UUID(ann.id))
    assert (erasure.erased, erasure.by.id) == (1, ann.id)
    assert erasure.by.request_id == erased.headers["x-request-id"]


def test_history_answers_in_pages_that_add_up_to_the_whole(
    client: TestClient, world: World
) -> None:
    """`limit` changes a page, oldest first, `meta.next_cursor` to the next (review18: anyone
    allowed to change a memory can grow its history, so it is paged as lists are); a cursor
    of another memory's history, a tampered one or a `limit` outside 1-100 is 422."""
    ann = world.user("Ann", "acme")
    bot = world.agent(ann)
    memory = stored(client, bot, scope="subject", subject_id=ann.id)
    other = stored(client, bot)
    for _ in range(2):
        for action in ("archive", "restore"):
            answer = client.post(f"{HUMAN}/{memory['id']}/{action}", headers=ann.headers)
            assert answer.status_code == 200, answer.text
    url = f"{HUMAN}/{memory['id']}/history"
    whole = client.get(url, headers=ann.headers).json()
    assert len(whole["data"]) == 5
    assert whole["meta"] == {"limit": 100, "has_more": False, "next_cursor": None}
    pages, cursor = [], None
    while True:
        params: dict[str, Any] = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        answer = client.get(url, params=params, headers=ann.headers)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        pages.append(body["data"])
        cursor = body["meta"]["next_cursor"]
        assert body["meta"]["has_more"] is (cursor is not None)
        if cursor is None:
            break
    assert [len(page) for page in pages] == [2, 2, 1]
    assert [row for page in pages for row in page] == whole["data"]
    first = client.get(url, params={"limit": 2}, headers=ann.headers).json()["meta"]["next_cursor"]
    elsewhere = f"{AGENT}/{other['id']}/history"
    refused = [
        client.get(elsewhere, params={"cursor": first}, headers=bot.headers),
        client.get(url, params={"cursor": first[:-2] + "xx"}, headers=ann.headers),
        client.get(url, params={"limit": 0}, headers=ann.headers),
        client.get(url, params={"limit": 101}, headers=ann.headers),
    ]
    for answer in refused:
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["code"] == "invalid_pagination", answer.text


def test_a_late_history_page_reads_from_its_cursor_not_past_the_rows_before_it(
    client: TestClient, world: World, store: Store
) -> None:
    """Pages continue from the previous page's last change (the history's key), never by an
    OFFSET: a late page of a long history (review18: anyone allowed to change a memory can grow
    it) costs what its rows cost, and its rows are the same as by offset."""
    ann = world.user("Ann", "acme")
    memory = stored(client, world.agent(ann), scope="subject", subject_id=ann.id)
    for _ in range(3):
        for action in ("archive", "restore"):
            answer = client.post(f"{HUMAN}/{memory['id']}/{action}", headers=ann.headers)
            assert answer.status_code == 200, answer.text
    url = f"{HUMAN}/{memory['id']}/history"
    whole = client.get(url, headers=ann.headers).json()["data"]
    offsets: list[Any] = []  # each page's OFFSET: SQLite writes one (0) with any LIMIT

    def listener(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "memory_history" not in statement:
            return
        found = re.search(r"OFFSET (\?|%\((\w+)\)s)", statement)
        if found is None:
            offsets.append(0)
        else:
            name = found.group(2)
            offsets.append(parameters[-1] if name is None else parameters[name])

    engine = store._read_engine  # type: ignore[attr-defined]
    sa.event.listen(engine, "before_cursor_execute", listener)
    try:
        paged, cursor = [], None
        while True:
            params: dict[str, Any] = {"limit": 2} | ({"cursor": cursor} if cursor else {})
            body = client.get(url, params=params, headers=ann.headers).json()
            paged += body["data"]
            cursor = body["meta"]["next_cursor"]
            if cursor is None:
                break
    finally:
        sa.event.remove(engine, "before_cursor_execute", listener)
    assert paged == whole and len(whole) == 7
    assert offsets == [0, 0, 0, 0]
