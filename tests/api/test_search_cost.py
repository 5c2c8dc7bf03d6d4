"""A search costs what its words allow, never more (issue 11, finding 4).

Short words match whole words only, a query has at most `MAX_TERMS` distinct terms, SQLite
indexes 3- and 4-character prefixes, and a search that runs past `search_budget_ms` is stopped
with 422 `search_too_expensive`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain.models import Memory
from mnemos.domain.search import MAX_TERMS
from mnemos.storage import open_store
from mnemos.storage.base import Store
from mnemos.storage.sql import SqlStore
from tests.api.test_band_agent import BASE, error, listed, store
from tests.world import Actor, World, agent_memory

ROWS = 20_000
# Every row has every word: each of these 5+ letter prefixes merges 20,000 index entries.
HEAVY = "budget probe common words across several tables number"


def test_short_words_match_whole_words_only(client: TestClient, world: World) -> None:
    agent = world.agent(world.user("Eve", "short"))
    store(client, agent, "Every retry loop sends an e-mail")
    store(client, agent, "Evening tea at five")
    assert listed(client, agent, content_query="ev") == []
    assert listed(client, agent, content_query="e") == ["Every retry loop sends an e-mail"]
    assert listed(client, agent, content_query="eve") == [
        "Evening tea at five",
        "Every retry loop sends an e-mail",
    ]


def test_more_distinct_terms_than_the_cap_is_422(client: TestClient, world: World) -> None:
    agent = world.agent(world.user("Cap", "cap"))
    store(client, agent, "alpha bravo charlie delta echo foxtrot golf hotel india")
    words = "alpha bravo charlie delta echo foxtrot golf hotel india".split()
    assert len(listed(client, agent, content_query=" ".join(words[:MAX_TERMS]))) == 1
    # Repeats and prefixes implied by a longer word are not extra terms.
    assert len(listed(client, agent, content_query=" ".join(words[:MAX_TERMS] + ["alp"]))) == 1
    response = client.get(
        BASE, params={"content_query": " ".join(words[: MAX_TERMS + 1])}, headers=agent.headers
    )
    body = error(response, 422, "validation_failed")
    assert body["details"] == {"content_query": f"must contain at most {MAX_TERMS} words"}


def _memories(agent: Actor, count: int) -> list[Memory]:
    start = datetime.now(UTC) - timedelta(days=1)
    return [
        agent_memory(
            agent,
            f"{HEAVY} number{i % 97} filler{i % 13}",
            start + timedelta(milliseconds=i),
            id=uuid.uuid4(),
        )
        for i in range(count)
    ]


@pytest.fixture
def tiny_budget(settings: Settings) -> Iterator[tuple[TestClient, Store]]:
    tiny = settings.model_copy(update={"search_budget_ms": 1})
    opened = open_store(tiny)
    with TestClient(create_app(tiny, opened)) as test_client:
        yield test_client, opened
    opened.close()


def test_a_search_over_its_budget_is_422_search_too_expensive(
    tiny_budget: tuple[TestClient, Store], world: World, store: Store
) -> None:
    client, _ = tiny_budget
    agent = world.agent(world.user("Bud", "budget"))
    store.replace_memories(agent.tenant, _memories(agent, ROWS), [], datetime.now(UTC))
    # Every row matches every word: a page is found at once on the newest rows, but the total
    # of an offset page counts every match, hundreds of milliseconds against a 1 ms budget.
    response = client.get(
        BASE,
        params={"content_query": HEAVY, "page": 1, "page_size": 1},
        headers=agent.headers,
    )
    body = error(response, 422, "search_too_expensive")
    assert body["details"] == {"budget_ms": 1}
    # Lists are not searches: they keep working, and so does the connection that was stopped.
    for _ in range(3):
        assert len(listed(client, agent, limit=1)) == 1


def test_the_budget_is_lifted_after_the_search(
    tiny_budget: tuple[TestClient, Store], world: World, store: Store
) -> None:
    """PostgreSQL: the search's statement_timeout does not outlive it on the pooled connection."""
    client, opened = tiny_budget
    agent = world.agent(world.user("Lift", "lift"))
    store.replace_memories(agent.tenant, _memories(agent, ROWS), [], datetime.now(UTC))
    response = client.get(
        BASE, params={"content_query": HEAVY, "page": 1, "page_size": 1}, headers=agent.headers
    )
    error(response, 422, "search_too_expensive")
    assert isinstance(opened, SqlStore)
    with opened._read() as conn:
        if conn.dialect.name == "postgresql":
            assert conn.exec_driver_sql("SHOW statement_timeout").scalar_one() == "15s"
        # A heavy statement that is not a search runs past the search budget unhindered.
        heavy = "SELECT count(*) FROM (SELECT a.pk FROM memories a, memories b LIMIT 300000) x"
        assert conn.exec_driver_sql(heavy).scalar_one() == 300_000


def test_sqlite_indexes_three_and_four_character_prefixes(store: Store) -> None:
    assert isinstance(store, SqlStore)
    with store._read() as conn:
        if conn.dialect.name != "sqlite":
            pytest.skip("PostgreSQL matches prefixes in its GIN index; no prefix index to check")
        sql = conn.execute(
            sa.text("SELECT sql FROM sqlite_master WHERE name = 'memories_fts'")
        ).scalar_one()
    assert "prefix='3 4'" in sql
