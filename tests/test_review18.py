"""Tenth hostile review (review18): one tenant breaking, slowing or reading another; hostile
input.

Each test states the behaviour the finding asks for and is a strict xfail: it fails today for the
finding's reason (docs/decisions.md, "Tenth hostile review: findings (review18, 2026-12-05)").
"""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from mnemos.storage import postgres, search_plan, sql, sqlite
from mnemos.storage.base import Store
from mnemos.storage.sql import SqlStore
from tests.world import Actor, World, agent_memory, memory_body

AGENT_MEMORIES = "/api/v1/agent/memories"


def _store_many(store: Store, agent: Actor, contents: list[str], start: datetime) -> None:
    """`contents` as the agent's memories, oldest first, one second apart (straight into the
    store, as `tests/api/test_search_plan.py` fills it)."""
    rows = [
        agent_memory(agent, content, start + timedelta(seconds=i), id=uuid.uuid4())
        for i, content in enumerate(contents)
    ]
    store.replace_memories(agent.tenant, rows, [], datetime.now(UTC))


def _refresh_statistics(store: Store) -> None:
    """What a server in service does on its own: autovacuum's ANALYZE (PostgreSQL), FTS5's
    automerge (SQLite)."""
    assert isinstance(store, SqlStore)
    with store._write() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("ANALYZE memories")
        else:
            conn.exec_driver_sql("INSERT INTO memories_fts(memories_fts) VALUES ('optimize')")


# --- 1. another tenant's writes get this tenant's search refused ---------------------------


@pytest.mark.xfail(
    strict=True,
    reason="the plan's term estimates count every tenant's memories: another organization's "
    "writes of a word make this organization's search for it 422 words_too_common",
)
def test_another_tenants_writes_do_not_get_this_tenants_search_refused(
    client: TestClient, store: Store, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thresholds scaled down as `tests/api/test_search_plan.py` scales them (30,000 index
    entries become 1,000; a walk of 1,000 rows, 100), and the statistics read afresh (a server
    re-reads them every 60 s). Acme's agent holds 150 memories; the oldest names `marigold`.
    Its newest-first search for it is answered through the index: for Acme the word is rare.
    Then another organization, Globex, stores the word in 1,500 memories of its own (eight
    times each, so that its index entries span pages, as the plan tests do). Acme's
    data has not changed, yet the same search is now 422 `search_too_expensive`
    (`words_too_common`): the estimates (`_term_stats`: FTS5's segment pages and counts,
    PostgreSQL's `most_common_elems`) are of the whole index, every tenant's memories, so the
    word is "too common to look up" for Acme too, and the walk of Acme's newest rows does not
    reach its one match. At the real thresholds: any organization (or several together) whose
    memories hold a word more than 30,000 times gets every other tenant's search for that word
    refused where the match is not among the tenant's 1,000 newest memories of the audience."""
    monkeypatch.setattr(search_plan, "DRIVER_POSTINGS", 1_000)
    monkeypatch.setattr(search_plan, "WALK_EXPECTED_ROWS", 200)
    monkeypatch.setattr(sql, "WALK_ROWS", 100)
    monkeypatch.setattr(sqlite, "DRIVER_POSTINGS", 1_000)
    monkeypatch.setattr(sqlite, "STATS_SECONDS", 0.0)
    monkeypatch.setattr(postgres, "STATS_SECONDS", 0.0)
    acme = world.agent(world.user("Ann", "Acme"))
    globex = world.agent(world.user("Gus", "Globex"))
    start = datetime.now(UTC) - timedelta(days=2)
    _store_many(
        store,
        acme,
        ["the client likes marigold tea"] + [f"note number {i}" for i in range(149)],
        start,
    )
    _refresh_statistics(store)
    params = {"content_query": "marigold"}
    before = client.get(AGENT_MEMORIES, params=params, headers=acme.headers)
    assert before.status_code == 200, before.text
    assert [m["content"] for m in before.json()["data"]] == ["the client likes marigold tea"]

    _store_many(
        store,
        globex,
        [" ".join(["marigold"] * 8 + ["shipment", str(i)]) for i in range(1_500)],
        start + timedelta(days=1),
    )
    _refresh_statistics(store)

    after = client.get(AGENT_MEMORIES, params=params, headers=acme.headers)
    assert after.status_code == 200, after.text
    assert after.json()["data"] == before.json()["data"]


# --- 2. a person of another organization grows a memory's unpaged history without bound -----


@pytest.mark.xfail(
    strict=True,
    reason="a memory's history is answered whole (no page, no limit) and every archive/restore "
    "is a real change: a person of another organization grows an organization's history "
    "answers without bound",
)
def test_another_tenants_person_cannot_grow_a_history_answer_without_bound(
    client: TestClient, world: World
) -> None:
    """Globex's agent stores a subject memory about Ann, a person of Acme (allowed: docs/
    deploying.md, "a subject memory about a person of another organization"). Ann may archive
    and restore it ((a): a memory about her), and each is a real change (the no-op rule of
    review11 does not apply), so each adds a history row in Globex's tenant. The history
    endpoints are unpaginated ("The history endpoint stays unpaginated: without no-op rows a
    memory's history grows only by real changes"): after 51 rounds Globex's agent reads 103
    rows in one answer, and nothing bounds it but Ann's rate limit (3,000 requests a minute:
    about 4 million rows a day, each read in full, in one list and one JSON answer, by every
    history request of Globex's agents and by Ann's export). Lists answer at most 100 rows a
    page (`limit` 1-100): the history should too (a `limit` and a cursor), or keep a bounded
    number of rows per memory."""
    ann = world.user("Ann", "Acme")
    globex = world.agent(world.user("Gus", "Globex"))
    stored = client.post(
        AGENT_MEMORIES,
        json=memory_body("Ann prefers email", subject_id=ann.id),
        headers=globex.headers,
    )
    assert stored.status_code == 201, stored.text
    memory_id = stored.json()["data"]["id"]
    for _ in range(51):
        for action in ("archive", "restore"):
            changed = client.post(f"/api/v1/me/memories/{memory_id}/{action}", headers=ann.headers)
            assert changed.status_code == 200, changed.text
    history = client.get(f"{AGENT_MEMORIES}/{memory_id}/history", headers=globex.headers)
    assert history.status_code == 200, history.text
    assert len(history.json()["data"]) <= 100


# --- 3. one search's budget-cut count is kept as every tenant's verdict (SQLite) ------------


@pytest.mark.xfail(
    strict=True,
    reason="SQLite keeps a term count that ran out of the search's 30 ms budget as the "
    "term's count for 60 s: one tenant's search gets every tenant's searches of the word "
    "refused in that process",
)
def test_a_count_cut_short_by_one_search_does_not_refuse_another_tenants_search(
    client: TestClient, store: Store, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite corrects a term's page estimate by counting its entries, within
    `COUNT_BUDGET_SECONDS` (30 ms) per search for all its terms together (`_term_stats`); a
    term left no time gets `DRIVER_POSTINGS + 1` ("too common"), and that figure is kept in
    the process's `_counted` cache, for every tenant, as if it had been counted, until the
    estimates expire (60 s, or when a search fills `MAX_CACHED_RANGES`). Globex's search puts
    costly prefixes before the word (each such count took 30-390 ms at 1,000,000 memories:
    "Counting a term's entries has a budget"), so the word is reached with no time left; here
    the budget is 0 for Globex's one search, which is where its deadline leaves the word. The
    machine is idle again for Acme's search of the same word, and Acme, whose match the index
    would find at once, is refused with 422 `words_too_common` (its match is not among its
    newest rows). Globex can repeat it at will (a search of new terms fills the cache and
    clears it): a chosen word unsearchable for every tenant of the process. Suggested fix:
    keep only counts that completed; a count cut short is no knowledge about the term."""
    if not isinstance(store, sqlite.SqliteStore):
        pytest.skip("SQLite's term counts")
    monkeypatch.setattr(search_plan, "DRIVER_POSTINGS", 1_000)
    monkeypatch.setattr(search_plan, "WALK_EXPECTED_ROWS", 200)
    monkeypatch.setattr(sql, "WALK_ROWS", 100)
    monkeypatch.setattr(sqlite, "DRIVER_POSTINGS", 1_000)
    acme = world.agent(world.user("Ann", "Acme"))
    globex = world.agent(world.user("Gus", "Globex"))
    start = datetime.now(UTC) - timedelta(days=2)
    _store_many(
        store, acme, ["the harbour at dawn"] + [f"note number {i}" for i in range(149)], start
    )
    _store_many(
        store,
        globex,
        [" ".join(["harbor"] * 8 + ["crate", str(i)]) for i in range(1_500)],
        start + timedelta(days=1),
    )
    _refresh_statistics(store)
    params = {"content_query": "dawn"}
    # The word's pages say "too common" (it sorts among Globex's many entries), its count says 1.
    answered = client.get(AGENT_MEMORIES, params=params, headers=acme.headers)
    assert answered.status_code == 200, answered.text
    assert [m["content"] for m in answered.json()["data"]] == ["the harbour at dawn"]

    store._stats_at = -math.inf  # the kept estimates expire (every 60 s)
    budget = sqlite.COUNT_BUDGET_SECONDS
    monkeypatch.setattr(sqlite, "COUNT_BUDGET_SECONDS", 0.0)  # Globex's deadline, at the word
    client.get(AGENT_MEMORIES, params=params, headers=globex.headers)
    monkeypatch.setattr(sqlite, "COUNT_BUDGET_SECONDS", budget)  # idle again

    again = client.get(AGENT_MEMORIES, params=params, headers=acme.headers)
    assert again.status_code == 200, again.text
    assert again.json()["data"] == answered.json()["data"]
