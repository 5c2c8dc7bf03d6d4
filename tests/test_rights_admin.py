"""The operator's rights commands end to end (export-subject, erase-subject, set-retention) and
retention expiring exactly what it should, on both backends."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain.ids import utcnow
from mnemos.storage.base import Store
from mnemos.storage.schema import memories
from tests.world import Actor, World, memory_body

AGENT = "/api/v1/agent/memories"


def mnemos(database_url: str, *args: str, **options: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mnemos", *args, "--database-url", database_url],
        text=True,
        timeout=120,
        **{"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **options},
    )


def ok(database_url: str, *args: str) -> dict[str, Any]:
    done = mnemos(database_url, *args)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def stored(client: TestClient, agent: Actor, content: str, **fields: Any) -> str:
    answer = client.post(AGENT, json=memory_body(content, **fields), headers=agent.headers)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["data"]["id"])


def test_export_then_erase_a_subject(
    client: TestClient, world: World, database_url: str, tmp_path: Path
) -> None:
    ann, bob = world.user("Ann", "acme"), world.user("Bob", "acme")
    bot = world.agent(bob)
    about_ann = {
        stored(client, bot, f"ann {i}", scope="subject", subject_id=ann.id) for i in range(3)
    }
    about_bob = stored(client, bot, "bob", scope="subject", subject_id=bob.id)
    out = tmp_path / "ann.ndjson"

    summary = ok(database_url, "admin", "export-subject", "--user", ann.id, "--out", str(out))
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert {line["id"] for line in lines} == about_ann
    assert summary == {"user": ann.id, "exported": 3, "out": str(out), "bytes": out.stat().st_size}
    assert all(line["history"][0]["event"] == "created" for line in lines)
    mine = client.get("/api/v1/me/memories/export", headers=ann.headers).text.splitlines()
    assert sorted(map(json.loads, mine), key=str) == sorted(lines, key=str)  # the same lines

    erased = ok(database_url, "admin", "erase-subject", "--user", ann.id)
    assert (erased["user"], erased["erased"]) == (ann.id, 3)
    assert erased["at"].endswith("Z")  # times as the API writes them
    assert ok(database_url, "admin", "erase-subject", "--user", ann.id)["erased"] == 0
    assert client.get("/api/v1/me/memories/count", headers=ann.headers).json()["data"]["count"] == 0
    assert client.get(f"/api/v1/me/memories/{about_bob}", headers=bob.headers).status_code == 200

    missing = mnemos(database_url, "admin", "erase-subject", "--user", str(uuid.uuid4()))
    assert missing.returncode == 1 and json.loads(missing.stderr)["error"]["code"] == "not_found"
    bad = mnemos(database_url, "admin", "export-subject", "--user", "nope", "--out", str(out))
    assert bad.returncode == 2 and "must be a UUID" in bad.stderr


def test_export_shows_a_progress_bar_on_a_terminal(
    client: TestClient, world: World, database_url: str, tmp_path: Path
) -> None:
    ann = world.user("Ann", "acme")
    bot = world.agent(ann)
    stored(client, bot, "ann", scope="subject", subject_id=ann.id)
    out = tmp_path / "ann.ndjson"
    leader, follower = pty.openpty()
    done = mnemos(
        database_url, "admin", "export-subject", "--user", ann.id, "--out", str(out),
        stderr=follower,
    )  # fmt: skip
    os.close(follower)
    shown = os.read(leader, 65536).decode()
    os.close(leader)
    assert json.loads(done.stdout)["exported"] == 1
    assert "exporting" in shown and "100%" in shown


def _backdate(store: Store, memory_ids: list[str], days: int) -> None:
    when = utcnow() - timedelta(days=days)
    with store._write() as conn:  # type: ignore[attr-defined]
        conn.execute(
            memories.update()
            .where(memories.c.id.in_([uuid.UUID(i) for i in memory_ids]))
            .values(inserted_at=when)
        )


def _statuses(store: Store) -> dict[str, str]:
    with store._read() as conn:  # type: ignore[attr-defined]
        return {str(i): s for i, s in conn.execute(sa.select(memories.c.id, memories.c.status))}


def test_retention_expires_exactly_what_it_should(
    client: TestClient, world: World, store: Store, database_url: str
) -> None:
    ann, eve = world.user("Ann", "acme"), world.user("Eve", "other")
    bot, eve_bot = world.agent(ann), world.agent(eve)
    working = {"system": "working", "type": "episodic"}
    sensory = {"system": "sensory", "type": "iconic"}
    old = {
        "org": stored(client, bot, "o", scope="organization", **working),
        "subject": stored(client, bot, "s", scope="subject", subject_id=ann.id, **working),
        "private": stored(client, bot, "p", **working),
    }
    superseded = stored(client, bot, "x", **working)  # corrected by its agent: stays so
    client.post(f"{AGENT}/{superseded}/supersede", headers=bot.headers)
    kept = {
        "new": stored(client, bot, "n", scope="organization", **working),
        "long_term": stored(client, bot, "l", scope="organization"),
        "sensory": stored(client, bot, "i", scope="organization", **sensory),
        "other_org": stored(client, eve_bot, "e", scope="organization", **working),
        "other_private": stored(client, eve_bot, "q", **working),
    }
    others = [superseded, *[v for k, v in kept.items() if k != "new"]]
    _backdate(store, [*old.values(), *others], days=40)
    org = world.org("acme")
    assert ok(database_url, "admin", "set-retention", "--org", org, "--system", "working", "--days", "30") == {  # noqa: E501
        "org": org, "system": "working", "days": 30,
    }  # fmt: skip
    refused = mnemos(
        database_url, "admin", "set-retention", "--org", org, "--system", "long_term", "--days", "1"
    )  # noqa: E501
    assert refused.returncode == 2
    unknown = mnemos(
        database_url,
        "admin",
        "set-retention",
        "--org",
        str(uuid.uuid4()),
        "--system",
        "working",
        "--days",
        "1",
    )  # noqa: E501
    assert json.loads(unknown.stderr)["error"]["code"] == "not_found"

    services = client.app.state.services  # type: ignore[attr-defined]
    services.retention.batch = 2  # several batches
    assert services.retention.expire() == 3
    statuses = _statuses(store)
    assert {statuses[i] for i in old.values()} == {"archived"}
    assert {k: statuses[v] for k, v in kept.items()} == dict.fromkeys(kept, "active")
    assert statuses[superseded] == "superseded"
    assert services.retention.expire() == 0
    history = client.get(f"{AGENT}/{old['org']}/history", headers=bot.headers).json()["data"]
    assert [(h["event"], h["actor"]["type"]) for h in history][-1] == ("expired", "server")
    listed = client.get(AGENT, params={"status": "all"}, headers=bot.headers).json()["data"]
    assert old["private"] in {m["id"] for m in listed}  # status=all still shows them

    ok(database_url, "admin", "set-retention", "--org", org, "--system", "working", "--days", "0")
    assert store.retention_policies() == []


def test_the_server_expires_in_the_background(
    settings: Settings, store: Store, world: World
) -> None:
    ann = world.user("Ann", "acme")
    bot = world.agent(ann)
    fast = settings.model_copy(update={"retention_interval_seconds": 0.05})
    with TestClient(create_app(fast, store)) as client:
        memory = stored(client, bot, "w", scope="organization", system="working", type="episodic")
        _backdate(store, [memory], days=3)
        client.app.state.services.retention.set(uuid.UUID(world.org("acme")), "working", 1)  # type: ignore[attr-defined]
        for _ in range(400):  # a wait for the background pass, not a measurement
            if _statuses(store)[memory] == "archived":
                break
            time.sleep(0.05)
        assert _statuses(store)[memory] == "archived"
