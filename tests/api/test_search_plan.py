"""Searches are planned from index statistics (storage/search_plan.py): a walk of the newest rows,
an index lookup of only the rare terms with the others checked on the rows, or a refusal. Where
a plan runs, it answers exactly what matching every term in the index answers.
"""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from mnemos.domain.models import Scope, Status
from mnemos.domain.pagination import Position
from mnemos.domain.queries import Audience, MemoryQuery
from mnemos.domain.search import SearchQuery, parse_search
from mnemos.storage import search_plan, sql, sqlite
from mnemos.storage.base import Store
from mnemos.storage.search_plan import SearchPlan, TermStats, plan_search
from mnemos.storage.sql import SqlStore
from tests.api.test_band_agent import BASE, error
from tests.world import Actor, World, agent_memory

ROWS = 3_000


def _content(i: int) -> str:
    # Common words repeat, so that their index entries span many pages even at 3,000 rows.
    words = ["alpha"] * 8  # every row
    words += ["bravo"] * 8 if i % 2 == 0 else []  # half
    words += ["charlie"] if i % 5 == 0 else []  # a fifth
    words += ["golf"] * 8 if i % 2 == 0 or i % 300 == 1 else ["hotel"] * 8  # together: 1 in 300
    words += ["hotel"] if i % 300 == 0 else []
    words += ["echo"] if i % 100 == 7 else []  # 1%
    words += ["zulu"] if i == 1_234 else []  # once
    words += [f"filler{i % 37}", "ab", "cd" if i % 3 == 0 else "ef"]
    return " ".join(words) + ("" if i % 7 else " alpha bravo in a phrase")


def _fill(store: Store, agent: Actor) -> None:
    start = datetime.now(UTC) - timedelta(days=1)
    rows = [
        agent_memory(
            agent,
            _content(i),
            start + timedelta(seconds=i),
            id=uuid.uuid4(),
            status=Status.ARCHIVED if i % 11 == 0 else Status.ACTIVE,
        )
        for i in range(ROWS)
    ]
    store.replace_memories(agent.tenant, rows, [], datetime.now(UTC))
    assert isinstance(store, SqlStore)
    with store._write() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("ANALYZE memories")  # what autovacuum does in service
        else:  # one segment, as FTS5's automerge makes of an index in service
            conn.exec_driver_sql("INSERT INTO memories_fts(memories_fts) VALUES ('optimize')")


QUERIES = [
    "alpha",
    "alpha bravo",
    "golf hotel",  # each common, rarely together
    "alpha bravo golf hotel",
    "golf hotel echo",
    "echo alpha",
    "zulu alpha bravo",
    "charlie echo",
    "char golf",
    "fill golf hotel",
    "cd golf hotel",  # a whole short word
    '"alpha bravo" golf hotel',  # a phrase
    '"bravo in" alpha',
    "filler3 alpha",
    "nothing alpha",
]


def _index_answer(store: SqlStore, query: MemoryQuery, limit: int, after: Position | None) -> list:
    """The answer of the plain plan: every term matched in the index."""
    statement, params = store.list_statement(query, limit=limit, after=after)
    with store._read() as conn:
        return [row[0] for row in conn.execute(statement, params)]


@pytest.fixture
def small_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thresholds scaled to 3,000 rows, so that every kind of plan runs on them."""
    monkeypatch.setattr(search_plan, "DRIVER_POSTINGS", 1_000)
    monkeypatch.setattr(search_plan, "WALK_EXPECTED_ROWS", 200)
    monkeypatch.setattr(sql, "WALK_ROWS", 100)


@pytest.mark.usefixtures("small_thresholds")
def test_planned_searches_answer_what_the_index_answers(store: Store, world: World) -> None:
    assert isinstance(store, SqlStore)
    agent = world.agent(world.user("Plan", "plan"))
    _fill(store, agent)
    mine = uuid.UUID(agent.id)
    own = Audience(source_agent_id=mine, tenant_id=agent.tenant)
    audiences = [
        (own,),
        (own, Audience(source_agent_id=mine, scopes=(Scope.AGENT,), tenant_id=agent.tenant)),
    ]
    seen = {"refused": 0, "walked": 0, "rechecked": 0}
    for text in QUERIES:
        search = parse_search(text, 500)
        with store._search_read() as conn:
            plan = plan_search(search, store._term_stats(conn, search), 21)
        seen["walked"] += plan.walk
        seen["rechecked"] += plan.recheck and plan.driver is not None
        for audience in audiences:
            for statuses in ((Status.ACTIVE,), tuple(Status)):
                query = MemoryQuery(audiences=audience, search=search, statuses=statuses)
                after: Position | None = None
                for _ in range(3):  # three pages
                    try:
                        page = store.list_memories(query, limit=21, after=after)
                    except Exception as exc:  # a refusal is the only failure allowed
                        assert type(exc).__name__ == "SearchTooExpensive", text
                        seen["refused"] += 1
                        break
                    assert [m.id for m in page] == _index_answer(store, query, 21, after), text
                    if len(page) < 21:
                        break
                    after = Position(page[-1].inserted_at, page[-1].id)
    # Each kind of plan ran.
    assert seen["refused"] and seen["walked"] and seen["rechecked"], seen


@pytest.mark.usefixtures("small_thresholds")
def test_common_words_rarely_together_are_refused_before_they_run(
    client: TestClient, world: World, store: Store
) -> None:
    agent = world.agent(world.user("Refuse", "refuse"))
    _fill(store, agent)
    # Each word is in half the rows, together in one row of 300: more entries than may be
    # looked up, and no page of matches among the newest rows.
    response = client.get(BASE, params={"content_query": "golf hotel"}, headers=agent.headers)
    body = error(response, 422, "search_too_expensive")
    assert body["details"] == {"reason": "words_too_common"}
    # A common word alone is answered off the newest rows; with a rare word, through the index.
    for text, found in (("golf", True), ("golf hotel echo", False), ("alpha echo", True)):
        response = client.get(BASE, params={"content_query": text}, headers=agent.headers)
        assert response.status_code == 200, response.text
        assert bool(response.json()["data"]) is found, text


def test_term_estimates_tell_common_from_rare(store: Store, world: World) -> None:
    assert isinstance(store, SqlStore)
    agent = world.agent(world.user("Stats", "stats"))
    _fill(store, agent)
    search = parse_search('alpha golf echo "alpha bravo"', 500)
    with store._search_read() as conn:
        stats = store._term_stats(conn, search)
    assert stats is not None and stats.rows >= ROWS
    alpha, golf, echo, phrase = stats.postings
    assert alpha >= golf > echo
    assert phrase >= golf


def _stats(rows: int, *postings: int) -> TermStats:
    return TermStats(rows, postings)


def test_the_plan_rule() -> None:
    search = SearchQuery(("babab", "babag", "babaf"), ())
    million = 1_000_000
    # Every term common, rarely together: walk, then refuse.
    assert plan_search(search, _stats(million, 900_000, 600_000, 350_000), 21) == SearchPlan(
        walk=True, driver=None, recheck=True
    )
    # One rare term: look it up, check the others on its rows.
    plan = plan_search(search, _stats(million, 900_000, 600_000, 2_000), 21)
    assert plan == SearchPlan(walk=False, driver=SearchQuery(("babaf",), ()), recheck=True)
    # All cheap: the whole query in the index, as before.
    plan = plan_search(search, _stats(million, 9_000, 6_000, 2_000), 21)
    assert plan == SearchPlan(walk=False, driver=search, recheck=False)
    # A common word alone: a page is expected among the newest rows.
    one = SearchQuery(("harbor",), ())
    assert plan_search(one, _stats(million, 100_000), 21).walk
    # No statistics: the index, as before.
    assert plan_search(search, None, 21) == SearchPlan(walk=False, driver=search, recheck=False)


def test_counting_a_term_is_bounded(
    store: Store, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite counts the entries of a term whose index pages look too common (pages overcount)
    only within `COUNT_BUDGET_SECONDS` per search: past it the term keeps its estimate (too
    common), so a search of new common prefixes cannot make every request pay the counts."""
    if not isinstance(store, sqlite.SqliteStore):
        pytest.skip("SQLite's term counts")
    agent = world.agent(world.user("Count", "count"))
    _fill(store, agent)
    golf = sum(1 for i in range(ROWS) if "golf" in _content(i).split())
    limit = golf + 100  # golf's pages say more than this, its count says fewer
    monkeypatch.setattr(sqlite, "DRIVER_POSTINGS", limit)
    search = parse_search("golf", 500)

    def postings(budget: float) -> int:
        monkeypatch.setattr(sqlite, "COUNT_BUDGET_SECONDS", budget)
        store._stats_at = -math.inf  # forget the kept estimates and counts
        with store._search_read() as conn:
            stats = store._term_stats(conn, search)
            # The read goes on after a count was cut short.
            assert conn.exec_driver_sql("SELECT count(*) FROM memories").scalar_one() == ROWS
        assert stats is not None
        return stats.postings[0]

    assert postings(5.0) == golf  # counted: the estimate was too high
    assert postings(0.0) > limit  # no time left to count: its pages say too common
    assert postings(5.0) == golf


@pytest.mark.usefixtures("small_thresholds")
def test_terms_too_common_in_the_index_are_counted_in_the_audiences_own_rarest_first() -> None:
    """`own_plan` (review18, finding 2): a term another tenant makes common is looked up when the
    caller's own audiences hold it rarely; counting stops at the first term that fits."""
    search = parse_search("golf hotel echo", 500)
    stats = TermStats(rows=100_000, postings=(50_000, 40_000, 60_000))
    assert plan_search(search, stats, 21).driver is None
    own = {"golf": 5_000, "hotel": 12, "echo": 3}
    asked: list[str] = []

    def count(part: SearchQuery, most: int) -> int:
        asked.append(part.words[0])
        return min(own[part.words[0]], most + 1)

    plan = search_plan.own_plan(search, stats, 21, count)
    assert asked == ["hotel"]  # the rarest by the estimates first, then no more
    assert plan.driver == parse_search("hotel", 500)
    assert plan.recheck
    asked.clear()
    own["hotel"] = 5_000
    assert search_plan.own_plan(search, stats, 21, count).driver == parse_search("echo", 500)
    assert asked == ["hotel", "golf", "echo"]
    own["echo"] = 5_000
    assert search_plan.own_plan(search, stats, 21, count).driver is None
