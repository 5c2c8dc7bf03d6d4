"""Findings of the hostile live review "review11" (2026-12-05): history, retention, exports,
metrics and MCP, each reproduced through the app, the store or the real command line, on the
backends where the finding applies.

Each test failed on the code it was written against for the finding's reason (strict xfails
when written; docs/decisions.md, "Third hostile review: findings"); all are fixed now.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import orjson
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain.history import SERVER, by_operator
from mnemos.domain.ids import utcnow
from mnemos.domain.models import RetentionPolicy, System
from mnemos.storage.base import Store
from mnemos.storage.postgres import driver_url
from mnemos.storage.schema import memories, memory_history
from tests.api.test_mcp import HEADERS as MCP_HEADERS
from tests.api.test_mcp import call
from tests.world import Actor, World, memory_body

AGENT = "/api/v1/agent/memories"
HUMAN = "/api/v1/me/memories"
WORKING = {"system": "working", "type": "episodic"}


def _stored(client: TestClient, agent: Actor, content: str, **fields: Any) -> str:
    answer = client.post(AGENT, json=memory_body(content, **fields), headers=agent.headers)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["data"]["id"])


def _backdate(store: Store, memory_id: str, days: int) -> None:
    with store._write() as conn:  # type: ignore[attr-defined]
        conn.execute(
            memories.update()
            .where(memories.c.id == uuid.UUID(memory_id))
            .values(inserted_at=utcnow() - timedelta(days=days))
        )


def _events(store: Store, memory_id: str) -> list[str]:
    query = (
        sa.select(memory_history.c.event)
        .where(memory_history.c.memory_id == uuid.UUID(memory_id))
        .order_by(memory_history.c.pk)
    )
    with store._read() as conn:  # type: ignore[attr-defined]
        return [str(event) for event in conn.execute(query).scalars()]


def _postgres_only(database_url: str) -> None:
    if database_url.startswith("sqlite"):
        pytest.skip("PostgreSQL only")


# --- 1. Retention turns a superseded memory into a restorable one ----------------------------


def test_retention_does_not_let_a_superseded_memory_come_back_as_active(
    client: TestClient, world: World, store: Store
) -> None:
    ann = world.user("Ann", "acme")
    bot = world.agent(ann)
    wrong = _stored(client, bot, "Ann is vegetarian", scope="subject", subject_id=ann.id, **WORKING)
    superseded = client.post(f"{AGENT}/{wrong}/supersede", headers=bot.headers)
    assert superseded.json()["data"]["status"] == "superseded"
    _backdate(store, wrong, days=40)
    services = client.app.state.services  # type: ignore[attr-defined]
    services.retention.set(uuid.UUID(world.org("acme")), "working", 30)
    assert services.retention.expire() == 0  # only active memories expire

    client.post(f"{HUMAN}/{wrong}/restore", headers=ann.headers)  # "undo the expiry"
    now = client.get(f"{HUMAN}/{wrong}", headers=ann.headers).json()["data"]
    assert now["status"] == "superseded"
    # The agent said this was wrong: no retention pass may turn it back into an active memory,
    # which every default list and every search then serves again.
    assert now["status"] != "active", _events(store, wrong)


# --- 2. Two retention passes at once (two workers) on PostgreSQL ------------------------------


def test_two_retention_passes_at_once_expire_a_memory_once(
    client: TestClient, world: World, store: Store, database_url: str
) -> None:
    _postgres_only(database_url)
    ann = world.user("Ann", "acme")
    bot = world.agent(ann)
    memory = _stored(client, bot, "standup notes", scope="organization", **WORKING)
    _backdate(store, memory, days=40)
    org = uuid.UUID(world.org("acme"))
    policy = RetentionPolicy(org, System.WORKING, 30)
    before = utcnow() - timedelta(days=30)
    first = sa.create_engine(driver_url(database_url))
    second_pass: list[int] = []
    try:
        with first.connect() as conn:
            # The first worker's pass, still in its transaction: `expire_memories`' statements.
            open_pass = conn.begin()
            archived = conn.execute(
                memories.update()
                .where(memories.c.tenant_id == org, memories.c.id == uuid.UUID(memory))
                .values(status="archived", updated_at=utcnow())
            )
            assert archived.rowcount == 1
            history = {"tenant_id": org, "memory_id": uuid.UUID(memory), "event": "expired"}
            conn.execute(
                memory_history.insert().values(
                    **history, subject_id=None, actor_type="server", at=utcnow()
                )
            )
            # The second worker's pass (every worker process runs one) while the first holds it.
            runner = threading.Thread(
                target=lambda: second_pass.append(
                    store.expire_memories(policy, before, 500, SERVER).changed
                )
            )
            runner.start()
            for _ in range(400):  # a wait for the second pass to block on the row, not a timing
                waiting = conn.exec_driver_sql(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                ).scalar()
                if waiting:
                    break
                time.sleep(0.05)
            open_pass.commit()
            runner.join(60)
    finally:
        first.dispose()
    assert _events(store, memory) == ["created", "expired"]
    assert second_pass == [0], "the second pass counted a memory the first had archived"


# --- 3. A person's export on PostgreSQL rewrites their metadata --------------------------------


def test_a_persons_export_keeps_metadata_as_the_api_answers_it(
    client: TestClient, world: World, database_url: str
) -> None:
    _postgres_only(database_url)
    ann = world.user("Ann", "acme")
    bot = world.agent(ann)
    metadata = {"zeta": 1, "alpha": 2, "ratio": 1e20, "tiny": -0.0, "far": 1.5e300}
    about_ann = {"scope": "subject", "subject_id": ann.id, "metadata": metadata}
    memory = _stored(client, bot, "odd numbers", **about_ann)
    answered = client.get(f"{HUMAN}/{memory}", headers=ann.headers).json()["data"]["metadata"]
    exported = client.get(f"{HUMAN}/export", headers=ann.headers)
    assert exported.status_code == 200
    (line,) = [orjson.loads(raw) for raw in exported.content.splitlines() if raw]
    # Same values, same types, same order as the API: 1e20 is not an integer of 21 digits (one
    # that no longer fits the 64 bits Mnemos itself accepts back), -0.0 keeps its sign.
    assert json.dumps(line["metadata"]) == json.dumps(answered)


# --- 4. What MCP does is missing from the metrics ---------------------------------------------


def _series_sum(scraped: str, name: str) -> float:
    """The sum of every series of one metric in a `/metrics` answer."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in scraped.splitlines()
        if line.startswith((name + "{", name + " "))
    )


def test_mcp_writes_and_refusals_are_counted_like_the_rest_apis(
    settings: Settings, store: Store, world: World
) -> None:
    ann = world.user("Ann", "acme")
    bot = world.agent(ann)
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {bot.api_key}"}
    on = settings.model_copy(update={"metrics": True})
    store_args = memory_body("from an MCP client")["memory"]
    with TestClient(create_app(on, store)) as client:
        before = client.get("/metrics").text
        stored = client.post("/mcp", json=call("store_memory", store_args), headers=headers)
        assert stored.json()["result"]["isError"] is False, stored.text
        missing = {"memory_id": str(uuid.uuid4())}
        refused = client.post("/mcp", json=call("get_memory", missing), headers=headers)
        assert refused.json()["result"]["isError"] is True, refused.text
        after = client.get("/metrics").text
    writes = "mnemos_memory_writes_total"
    errors = "mnemos_errors_total"
    assert _series_sum(after, writes) - _series_sum(before, writes) == 1, "the store"
    assert _series_sum(after, errors) - _series_sum(before, errors) == 1, "the not_found"


# --- 5. A change to the status a memory already has is recorded, without bound -----------------


def test_a_status_change_that_changes_nothing_records_nothing(
    client: TestClient, world: World
) -> None:
    ann = world.user("Ann", "acme")
    bot = world.agent(ann)
    memory = _stored(client, bot, "about Ann", scope="subject", subject_id=ann.id)
    for _ in range(3):  # any agent that stored a memory can repeat this at its request rate
        client.post(f"{AGENT}/{memory}/archive", headers=bot.headers)
    shown = client.get(f"{HUMAN}/{memory}/history", headers=ann.headers).json()["data"]
    # One archive happened; the history (served whole, unpaginated, and carried into Ann's
    # export) says three did.
    assert [row["event"] for row in shown] == ["created", "archived"]


# --- 6. What a retention policy archived cannot be brought back ------------------------------


def test_a_persons_restore_of_an_expired_memory_holds(
    client: TestClient, world: World, store: Store
) -> None:
    ann = world.user("Ann", "acme")
    bot = world.agent(ann)
    memory = _stored(client, bot, "Ann's allergy", scope="subject", subject_id=ann.id, **WORKING)
    _backdate(store, memory, days=40)
    services = client.app.state.services  # type: ignore[attr-defined]
    services.retention.set(uuid.UUID(world.org("acme")), "working", 30)
    assert services.retention.expire() == 1
    restored = client.post(f"{HUMAN}/{memory}/restore", headers=ann.headers)
    assert restored.status_code == 200 and restored.json()["data"]["status"] == "active"
    services.retention.expire()  # the next pass (every 300 s in every server process)
    now = client.get(f"{HUMAN}/{memory}", headers=ann.headers).json()["data"]
    assert now["status"] == "active", _events(store, memory)


def test_an_organization_memory_a_wrong_policy_expired_can_be_brought_back(
    client: TestClient, world: World, store: Store
) -> None:
    ann = world.user("Ann", "acme")
    bot = world.agent(ann)
    memory = _stored(client, bot, "release checklist", scope="organization", **WORKING)
    _backdate(store, memory, days=10)
    services = client.app.state.services  # type: ignore[attr-defined]
    org = uuid.UUID(world.org("acme"))
    services.retention.set(org, "working", 1)  # meant 100
    assert services.retention.expire() == 1
    services.retention.set(org, "working", 0)  # the operator lifts the wrong policy
    # "a wrong policy can be undone" (decisions.md, "Retention archives"): the agent cannot
    # restore (no route) and the owner of the agent is refused (an organization memory is not
    # theirs to change); the operator's `mnemos admin restore-expired` brings it back.
    owner = client.post(f"{HUMAN}/{memory}/restore", headers=ann.headers)
    assert owner.status_code == 403
    assert services.retention.restore(org, "working", by_operator()) == 1
    now = client.get(f"{AGENT}/{memory}", headers=bot.headers).json()["data"]
    assert now["status"] == "active"
    assert _events(store, memory) == ["created", "expired", "restored"]
    assert services.retention.restore(org, "working", by_operator()) == 0


def test_mcp_requests_are_labelled_with_their_route(
    settings: Settings, store: Store, world: World
) -> None:
    ann = world.user("Ann", "acme")
    bot = world.agent(ann)
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {bot.api_key}"}
    on = settings.model_copy(update={"metrics": True})
    with TestClient(create_app(on, store)) as client:
        listed = client.post("/mcp", json=call("list_memories", {}), headers=headers)
        assert listed.status_code == 200, listed.text
        scraped = client.get("/metrics").text
    # Every MCP call is otherwise counted with the 404s of scanners, under `unmatched`.
    assert 'route="/mcp"' in scraped
