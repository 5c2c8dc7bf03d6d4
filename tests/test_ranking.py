"""The full-text ranker behind keyword search: relevance order and visibility, on every backend."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from mnemos.domain.accounts import hash_key
from mnemos.domain.ids import utcnow, uuid7
from mnemos.domain.memories import AgentListParams, MemoryService
from mnemos.domain.models import AgentContext, Memory, Scope, Status
from mnemos.domain.pagination import CursorCodec
from mnemos.domain.queries import Audience, Filters, MemoryQuery, Order
from mnemos.domain.recall import Recalled, SearchMode
from mnemos.domain.search import parse_search
from mnemos.storage.base import Store
from mnemos.storage.search_plan import TermStats
from tests.api.test_band_agent import listed
from tests.api.test_band_agent import store as put
from tests.world import Actor, World, agent_memory

TEXTS = [
    "green tea in the morning",
    "tea, tea and more tea: always tea",
    "a long note about the office, the plants, the printer and, once, tea with the staff",
    "coffee only, never anything else",
]


@pytest.fixture
def service(store: Store) -> MemoryService:
    return MemoryService(store, CursorCodec(b"k" * 32))


def context(store: Store, actor: Actor) -> AgentContext:
    ctx = store.agent_by_key(hash_key(actor.api_key))
    assert ctx is not None
    return ctx


def filters(text: str) -> Filters:
    return Filters(search=parse_search(text, 500))


def is_sqlite(store: Store) -> bool:
    return store.__class__.__name__.startswith("Sqlite")


def pool_pays(store: Store, monkeypatch: pytest.MonkeyPatch, min_share: float = 0.001) -> None:
    """On PostgreSQL, the pool is found by walking the owner's index first only for a search
    its statistics call common enough (`POOL_MIN_SHARE`; else in the GIN index alone, the same
    rows): fresh statistics, and `min_share` as that bound, so the walk is what runs."""
    if is_sqlite(store):
        return
    from mnemos.storage import postgres

    monkeypatch.setattr(postgres, "POOL_MIN_SHARE", min_share)
    with store._write_engine.begin() as conn:  # type: ignore[attr-defined]
        conn.exec_driver_sql("ANALYZE memories")
    store._stats = None  # type: ignore[attr-defined]


@pytest.fixture
def agent(client: TestClient, world: World) -> Actor:
    agent = world.agent(world.user("Ranker", "ranking"))
    for text in TEXTS:
        put(client, agent, text, scope="organization")
    return agent


def keyword(
    service: MemoryService,
    ctx: AgentContext,
    params: AgentListParams,
    text: str,
    limit: int,
    cursor: str | None = None,
) -> Recalled:
    return service.recall_as_agent(ctx, params, Filters(), text, SearchMode.KEYWORD, limit, cursor)


def test_best_first_with_scores(store: Store, service: MemoryService, agent: Actor) -> None:
    found = keyword(service, context(store, agent), AgentListParams(), "tea", 10)
    contents = [ranked.memory.content for ranked in found.items]
    assert contents[0] == TEXTS[1]  # the most occurrences ranks first on both backends
    assert set(contents) == set(TEXTS[:3])
    scores = [ranked.score for ranked in found.items]
    assert scores == sorted(scores, reverse=True) and scores[-1] > 0
    assert found.meta["has_more"] is False and found.meta["next_cursor"] is None


def test_pages_walk_the_same_order(store: Store, service: MemoryService, agent: Actor) -> None:
    ctx, params = context(store, agent), AgentListParams(memory_scope="org", scope="all")
    whole = keyword(service, ctx, params, "tea", 10).items
    walked, cursor = [], None
    while True:
        page = keyword(service, ctx, params, "tea", 1, cursor)
        walked += page.items
        cursor = page.meta["next_cursor"]
        if cursor is None:
            break
    assert [r.memory.id for r in walked] == [r.memory.id for r in whole]
    assert len(whole) == 3  # in two audiences (organization and own), counted once


def test_ranking_keeps_visibility(
    client: TestClient, store: Store, service: MemoryService, world: World, agent: Actor
) -> None:
    other = world.agent(world.user("Other", "ranking"))
    put(client, other, "tea tea tea tea, private", scope="agent")
    put(client, other, "tea for the organization", scope="organization")
    found = keyword(service, context(store, agent), AgentListParams(memory_scope="org"), "tea", 10)
    contents = {ranked.memory.content for ranked in found.items}
    assert "tea for the organization" in contents
    assert "tea tea tea tea, private" not in contents


def test_newest_first_lists_are_unchanged(client: TestClient, agent: Actor) -> None:
    assert listed(client, agent, content_query="tea") == [TEXTS[2], TEXTS[1], TEXTS[0]]


def test_orders_and_stores_refuse_each_other(store: Store) -> None:
    audience = (Audience(organization_id=uuid.UUID(int=3), tenant_id=uuid.UUID(int=3)),)
    with pytest.raises(ValueError):
        MemoryQuery(audiences=audience, order=Order.RELEVANCE)
    ranked = filters("tea").within(audience, Order.RELEVANCE)
    with pytest.raises(ValueError):
        store.list_memories(ranked, limit=1)
    with pytest.raises(ValueError):
        store.rank_memories(replace(ranked, order=Order.NEWEST), limit=1)


def test_a_pool_scores_only_the_newest_matches(
    store: Store, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rank_memories(pool=N)` (a hybrid search's keyword leg) ranks the newest N matches of
    each audience where the backend cuts a pool (`_cuts_pool`: on an agent's, room's or
    organization's scope token on SQLite, index on PostgreSQL; the cut comes before the
    filters), else every match; and every match whenever the pool leaves fewer than `limit`."""
    owner = world.user("Pool", "pooling")
    agent = world.agent(owner)
    start = utcnow() - timedelta(hours=1)
    older = [  # the best matches by far, stored first
        agent_memory(agent, "tea tea tea tea tea", start + timedelta(seconds=i)) for i in range(3)
    ]
    newer = [
        agent_memory(agent, f"a long note about plants, printers and, once, tea {i}", at)
        for i, at in enumerate(start + timedelta(minutes=5, seconds=i) for i in range(3))
    ]
    archived = agent_memory(agent, "tea", start + timedelta(minutes=9), status=Status.ARCHIVED)
    unrelated = agent_memory(agent, "coffee", start + timedelta(minutes=10))
    for batch in (older, newer, [archived, unrelated]):
        store.replace_memories(agent.tenant, batch, [], batch[0].inserted_at)
    pool_pays(store, monkeypatch)
    agent_scope = (Scope.AGENT,)
    audiences = {
        "by agent": Audience(
            source_agent_id=uuid.UUID(agent.id), scopes=agent_scope, tenant_id=agent.tenant
        ),
        "by owner": Audience(
            source_agent_owner_id=uuid.UUID(owner.id), scopes=agent_scope, tenant_id=agent.tenant
        ),
    }
    for audience in audiences.values():
        query = filters("tea").within((audience,), Order.RELEVANCE)
        exact = store.rank_memories(query, limit=10)
        assert [scored.id for scored in exact[:3]] == sorted(
            (m.id for m in older), reverse=True
        )  # equal scores: by id, descending
        assert {scored.id for scored in exact} == {m.id for m in older + newer}
        pooled = store.rank_memories(query, limit=3, pool=4)
        scores = [scored.score for scored in pooled]
        assert scores == sorted(scores, reverse=True)
        if store._cuts_pool(audience):  # type: ignore[attr-defined]
            # Cut inside the index, before the filters: the archived one took a place.
            assert {scored.id for scored in pooled} == {m.id for m in newer}
        else:
            assert pooled == exact[:3]
        # Fewer than `limit` in the pool after the filters: every match is scored.
        assert store.rank_memories(query, limit=4, pool=4) == exact[:4]
    assert store._cuts_pool(audiences["by agent"]) is True  # type: ignore[attr-defined]
    assert store._cuts_pool(audiences["by owner"]) is False  # type: ignore[attr-defined]


def test_postgresql_finds_the_same_pool_by_walking_or_by_the_index(
    store: Store, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL the pool is the owner's newest `pool` matches whatever the plan: for a
    search the statistics call common (`_walks_pool`), the owner's index is walked first, at
    most `pool / POOL_MIN_SHARE` rows, and the pool is completed from the GIN index when the
    walk ends short; for a rarer one it is looked up in the GIN index alone. Statistics count
    every tenant's memories, so they may choose the plan, never the pool."""
    if is_sqlite(store):
        pytest.skip("SQLite cuts the pool inside FTS5, on the newest matches")
    agent = world.agent(world.user("Walker", "walking"))
    start = utcnow() - timedelta(hours=1)
    best = agent_memory(agent, "tea tea tea tea tea", start)
    weak = [
        agent_memory(agent, f"a long note about plants, printers and, once, tea {i}", at)
        for i, at in enumerate((start + timedelta(minutes=1), start + timedelta(minutes=2)))
    ]
    unrelated = [
        agent_memory(agent, f"coffee {i}", start + timedelta(minutes=3 + i)) for i in range(3)
    ]
    for batch in ([best], weak, unrelated):
        store.replace_memories(agent.tenant, batch, [], batch[0].inserted_at)
    audience = Audience(
        source_agent_id=uuid.UUID(agent.id), scopes=(Scope.AGENT,), tenant_id=agent.tenant
    )
    query = filters("tea").within((audience,), Order.RELEVANCE)
    exact = [s.id for s in store.rank_memories(query, limit=3)]
    assert exact[0] == best.id and set(exact) == {best.id, *(m.id for m in weak)}
    from mnemos.storage import postgres

    monkeypatch.setattr(postgres, "POOL_MIN_SHARE", 0.5)  # pool 2: at most 4 rows walked
    answers = {}
    for share, plan in ((5, "walk"), (4, "index")):  # 50% of memories by the statistics, 40%
        monkeypatch.setattr(store, "_term_stats", lambda *_, n=share: TermStats(10, (n,)))
        # The walk reads the three newest and one weak match; the other weak match, older,
        # completes the pool; `best`, older still, is left out.
        pooled = store.rank_memories(query, limit=2, pool=2)
        answers[plan] = [s.id for s in pooled]
        assert set(answers[plan]) == {m.id for m in weak}
        # Fewer than `limit` in the pool: every match is scored.
        assert [s.id for s in store.rank_memories(query, limit=3, pool=2)] == exact
    assert answers["walk"] == answers["index"]
    shapes = store._statements  # type: ignore[attr-defined]
    plans = {shape[-1] for shape in shapes if shape[0] == "rank" and any(shape[-2])}
    assert plans == {True, False}  # the walk ran for the common word only


def subject_memory(agent: Actor, text: str, at: datetime, subject: Actor) -> Memory:
    assert agent.organization_id is not None
    return agent_memory(
        agent,
        text,
        at,
        scope=Scope.SUBJECT,
        subject_id=uuid.UUID(subject.id),
        organization_id=uuid.UUID(agent.organization_id),
    )


def test_another_tenants_memories_about_a_person_fill_no_pool(store: Store, world: World) -> None:
    """A subject's scope token is carried by every tenant's memories about the person: an
    audience narrowest by subject is never cut, or organization B writing about the person
    would push organization A's matches out of A's pool (review of the pool, finding 1)."""
    person = world.user("Subject", "elsewhere")
    ours = world.agent(world.user("Alice", "org-a"))
    theirs = world.agent(world.user("Bob", "org-b"))
    start = utcnow() - timedelta(hours=1)
    mine = subject_memory(ours, "tea with the subject", start, person)
    store.replace_memories(ours.tenant, [mine], [], mine.inserted_at)
    newer = [
        subject_memory(theirs, f"tea again {i}", start + timedelta(minutes=1 + i), person)
        for i in range(3)
    ]
    store.replace_memories(theirs.tenant, newer, [], newer[0].inserted_at)
    assert ours.organization_id is not None
    org = uuid.UUID(ours.organization_id)
    # As `visibility.agent_list` builds it for memory_scope=org&scope=subject&subject_id=...
    audience = Audience(
        organization_id=org, scopes=(Scope.SUBJECT,), subject_id=uuid.UUID(person.id), tenant_id=org
    )
    query = filters("tea").within((audience,), Order.RELEVANCE)
    assert store._cuts_pool(audience) is False  # type: ignore[attr-defined]
    assert [s.id for s in store.rank_memories(query, limit=1, pool=2)] == [mine.id]


def test_an_audiences_scopes_do_not_empty_its_pool(store: Store, world: World) -> None:
    """An organization-scope audience is cut on the organization's token, which its subject
    memories carry too: when newer subject memories fill the pool, every match is scored."""
    owner = world.user("Writer", "org-c")
    agent = world.agent(owner)
    assert agent.organization_id is not None
    org = uuid.UUID(agent.organization_id)
    start = utcnow() - timedelta(hours=1)
    shared = agent_memory(
        agent, "tea for everyone", start, scope=Scope.ORGANIZATION, organization_id=org
    )
    about = [
        subject_memory(agent, f"tea {i}", start + timedelta(minutes=1 + i), owner) for i in range(3)
    ]
    for batch in ([shared], about):
        store.replace_memories(agent.tenant, batch, [], batch[0].inserted_at)
    audience = Audience(organization_id=org, scopes=(Scope.ORGANIZATION,), tenant_id=org)
    query = filters("tea").within((audience,), Order.RELEVANCE)
    assert [s.id for s in store.rank_memories(query, limit=1, pool=2)] == [shared.id]


def _pooled_by_org(store: Store, world: World) -> tuple[Actor, uuid.UUID, Memory, list[Memory]]:
    """An organization whose best `tea` match is its oldest, with four newer weak ones: a pool
    of 2 (4 rows walked on PostgreSQL, `POOL_MIN_SHARE` 0.5) leaves the best one out."""
    agent = world.agent(world.user("Cached", "org-cache"))
    assert agent.organization_id is not None
    org = uuid.UUID(agent.organization_id)
    start = utcnow() - timedelta(hours=1)
    best = agent_memory(
        agent, "tea tea tea tea tea", start, scope=Scope.ORGANIZATION, organization_id=org
    )
    weak = [
        agent_memory(
            agent,
            f"a long note about plants, printers and, once, tea {i}",
            start + timedelta(minutes=1 + i),
            scope=Scope.ORGANIZATION,
            organization_id=org,
        )
        for i in range(4)
    ]
    for batch in ([best], weak):
        store.replace_memories(agent.tenant, batch, [], batch[0].inserted_at)
    return agent, org, best, weak


def test_a_cached_ranking_statement_never_cuts_an_audience_it_should_not(
    store: Store, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether an organization's audience is cut depends on its number of scopes on PostgreSQL
    (`_cuts_pool`: one scope only), which the statement cache's shape (the parameters' names)
    does not tell: a ranking must not depend on which query of the same shape ran first
    (review7, finding 1)."""
    agent, org, best, weak = _pooled_by_org(store, world)
    if not is_sqlite(store):
        from mnemos.storage import postgres

        monkeypatch.setattr(postgres, "POOL_MIN_SHARE", 0.5)
        monkeypatch.setattr(store, "_term_stats", lambda *_: TermStats(10, (5,)))
    idle = world.agent(world.user("Idle", "org-cache"))  # an agent's audience: always cut

    def query(*scopes: Scope) -> MemoryQuery:
        own = Audience(source_agent_id=uuid.UUID(idle.id), tenant_id=agent.tenant)
        shared = Audience(organization_id=org, scopes=scopes, tenant_id=agent.tenant)
        return filters("tea").within((own, shared), Order.RELEVANCE)

    queries = {"one": query(Scope.ORGANIZATION), "two": query(Scope.ORGANIZATION, Scope.SUBJECT)}

    def ranked(name: str) -> list[uuid.UUID]:
        return [s.id for s in store.rank_memories(queries[name], limit=1, pool=2)]

    def first(name: str) -> list[uuid.UUID]:
        store._statements.clear()  # type: ignore[attr-defined]
        return ranked(name)

    alone = {name: first(name) for name in queries}  # the same parameters' names: one shape
    assert first("one") == alone["one"] and ranked("two") == alone["two"]
    assert first("two") == alone["two"] and ranked("one") == alone["one"]
    if not is_sqlite(store):  # one scope: cut to the two newest; two: every match scored
        assert alone == {"one": [max(m.id for m in weak[2:])], "two": [best.id]}


def test_another_tenants_writes_do_not_switch_this_tenants_pool(store: Store, world: World) -> None:
    """On PostgreSQL the pool is cut only for a word the column statistics call common
    (`_pool_pays`): those statistics count every tenant's memories, so another tenant's stores
    (once ANALYZE has run) turn this tenant's pool on or off and change its ranking
    (review7, finding 2). SQLite's cut does not look at other tenants."""
    ours, org, _best, _weak = _pooled_by_org(store, world)
    theirs = world.agent(world.user("Other", "org-other"))
    own = Audience(organization_id=org, scopes=(Scope.ORGANIZATION,), tenant_id=ours.tenant)
    query = filters("tea").within((own,), Order.RELEVANCE)

    def ranked() -> list[uuid.UUID]:
        if not is_sqlite(store):
            with store._write_engine.begin() as conn:  # type: ignore[attr-defined]
                conn.exec_driver_sql("ANALYZE memories")
            store._stats = None  # type: ignore[attr-defined]
        # a pool of 4 (80 rows walked): the four newest weak matches, without the best one
        return [s.id for s in store.rank_memories(query, limit=1, pool=4)]

    before = ranked()
    start = utcnow() - timedelta(minutes=30)
    others = [agent_memory(theirs, f"coffee {i}", start + timedelta(seconds=i)) for i in range(400)]
    store.replace_memories(theirs.tenant, others, [], others[0].inserted_at)
    assert ranked() == before


def test_another_tenants_writes_about_a_person_do_not_cancel_a_pools_fallback(
    store: Store, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A person's search ranks what is about them in every tenant (never cut) beside their
    organization's memories (cut to a pool). When the organization's pool keeps too few after
    the filters, every match is scored (`rank_memories`), but "too few" counts every
    audience's results: another tenant's memory about the person cancels that fallback, and the
    organization's best match leaves the answer (review7, finding 3)."""
    person = world.user("Person", "org-a")
    assert person.organization_id is not None
    org = uuid.UUID(person.organization_id)
    ours = world.agent(world.user("Colleague", "org-a"))
    theirs = world.agent(world.user("Stranger", "org-b"))
    start = utcnow() - timedelta(hours=1)
    best = agent_memory(
        ours, "tea tea tea tea tea", start, scope=Scope.ORGANIZATION, organization_id=org
    )
    archived = [
        agent_memory(
            ours,
            f"tea {i}",
            start + timedelta(minutes=1 + i),
            scope=Scope.ORGANIZATION,
            organization_id=org,
            status=Status.ARCHIVED,
        )
        for i in range(2)
    ]
    for batch in ([best], archived):
        store.replace_memories(ours.tenant, batch, [], batch[0].inserted_at)
    if not is_sqlite(store):
        from mnemos.storage import postgres

        monkeypatch.setattr(postgres, "POOL_MIN_SHARE", 0.5)
        monkeypatch.setattr(store, "_term_stats", lambda *_: TermStats(10, (5,)))
    # As `visibility.human_audiences` builds them for scope=all (no rooms, no agents)
    about_me = Audience(subject_id=uuid.UUID(person.id), scopes=(Scope.SUBJECT,))
    shared = Audience(organization_id=org, scopes=(Scope.ORGANIZATION,), tenant_id=org)
    query = filters("tea").within((about_me, shared), Order.RELEVANCE)
    # The pool (the two archived) keeps nothing: every match is scored.
    assert [s.id for s in store.rank_memories(query, limit=1, pool=2)] == [best.id]
    elsewhere = subject_memory(theirs, "a note, once, about tea", utcnow(), person)
    store.replace_memories(theirs.tenant, [elsewhere], [], elsewhere.inserted_at)
    assert [s.id for s in store.rank_memories(query, limit=1)] == [best.id]  # still the best
    assert [s.id for s in store.rank_memories(query, limit=1, pool=2)] == [best.id]


def test_each_cut_audience_falls_back_to_every_match_on_its_own(
    store: Store, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent's search over its organization and its own memories cuts both audiences to a
    pool. The organization's pool (its two newest matches, archived) keeps nothing after the
    filters: every match of the organization is scored, although the agent's own pool alone
    fills the answer."""
    agent = world.agent(world.user("Reader", "org-fallback"))
    colleague = world.agent(world.user("Colleague", "org-fallback"))
    assert agent.organization_id is not None
    org = uuid.UUID(agent.organization_id)
    start = utcnow() - timedelta(hours=1)
    shared = {"scope": Scope.ORGANIZATION, "organization_id": org}
    best = agent_memory(colleague, "tea tea tea tea tea", start, **shared)
    archived = [
        agent_memory(
            colleague,
            f"tea {i}",
            start + timedelta(minutes=1 + i),
            status=Status.ARCHIVED,
            **shared,
        )
        for i in range(2)
    ]
    own = [
        agent_memory(agent, f"a long note about plants, printers and, once, tea {i}", at)
        for i, at in enumerate(start + timedelta(minutes=5 + i) for i in range(2))
    ]
    for batch in ([best], archived, own):
        store.replace_memories(batch[0].tenant_id, batch, [], batch[0].inserted_at)
    if not is_sqlite(store):
        from mnemos.storage import postgres

        monkeypatch.setattr(postgres, "POOL_MIN_SHARE", 0.5)
        monkeypatch.setattr(store, "_term_stats", lambda *_: TermStats(10, (5,)))
    # As `visibility.agent_list` builds them for memory_scope=org&scope=all
    audiences = (
        Audience(organization_id=org, scopes=(Scope.ORGANIZATION,), tenant_id=agent.tenant),
        Audience(source_agent_id=uuid.UUID(agent.id), tenant_id=agent.tenant),
    )
    assert all(store._cuts_pool(a) for a in audiences)  # type: ignore[attr-defined]
    query = filters("tea").within(audiences, Order.RELEVANCE)
    exact = [s.id for s in store.rank_memories(query, limit=2)]
    assert exact[0] == best.id
    assert [s.id for s in store.rank_memories(query, limit=2, pool=2)] == exact


def test_another_tenants_words_do_not_order_this_tenants_search(store: Store, world: World) -> None:
    """Two memories that hold two searched words, each one twice and the other once: under
    FTS5's bm25 (SQLite before), which counts every tenant's memories, which ranks first said
    which word is rarer, so one memory of another tenant holding a word flipped this tenant's
    order: a tenant learnt from its own search whether anyone else wrote the word
    (docs/decisions.md, "Keyword scores from the row alone"). Both backends score the row."""
    ours = world.agent(world.user("Prober", "org-probe"))
    theirs = world.agent(world.user("Holder", "org-holder"))
    start = utcnow() - timedelta(hours=1)
    texts = ["quixotrel quixotrel zzqnonce", "quixotrel zzqnonce zzqnonce", "zzqnonce alone"]
    probes = [
        agent_memory(ours, text, start + timedelta(seconds=i)) for i, text in enumerate(texts)
    ]
    # Other memories of ours: FTS5 weighs a word in half the index or more as nothing at all.
    others = [agent_memory(ours, f"lunch at noon {i}", start) for i in range(20)]
    store.replace_memories(ours.tenant, probes + others, [], start)
    audience = Audience(source_agent_id=uuid.UUID(ours.id), tenant_id=ours.tenant)
    query = filters("quixotrel zzqnonce").within((audience,), Order.RELEVANCE)
    before = [s.id for s in store.rank_memories(query, limit=2)]
    secrets = [
        agent_memory(theirs, f"the quixotrel launch is in spring {i}", utcnow()) for i in range(2)
    ]
    store.replace_memories(theirs.tenant, secrets, [], secrets[0].inserted_at)
    assert [s.id for s in store.rank_memories(query, limit=2)] == before


def test_another_tenants_lengths_do_not_order_this_tenants_search(
    store: Store, world: World
) -> None:
    """A one-word search: a long memory holding the word twice and a short one holding it once.
    Under bm25 the weight of a memory's length against its count is set by the average length
    of every memory in the index, so another tenant's many long memories flipped this order."""
    ours = world.agent(world.user("Prober", "org-probe"))
    theirs = world.agent(world.user("Writer", "org-writer"))
    start = utcnow() - timedelta(hours=1)
    filler = " ".join(f"filler{i}" for i in range(18))
    texts = [f"quixotrel {filler} quixotrel", "quixotrel alone"]
    probes = [
        agent_memory(ours, text, start + timedelta(seconds=i)) for i, text in enumerate(texts)
    ]
    others = [agent_memory(ours, f"lunch at noon {i}", start) for i in range(20)]
    store.replace_memories(ours.tenant, probes + others, [], start)
    audience = Audience(source_agent_id=uuid.UUID(ours.id), tenant_id=ours.tenant)
    query = filters("quixotrel").within((audience,), Order.RELEVANCE)
    before = [s.id for s in store.rank_memories(query, limit=2)]
    at = utcnow()
    long_ones = [
        agent_memory(theirs, " ".join(f"w{i}x{j}" for j in range(50 + i)), at) for i in range(200)
    ]
    store.replace_memories(theirs.tenant, long_ones, [], at)
    assert [s.id for s in store.rank_memories(query, limit=2)] == before


def _ranked_texts(store: Store, world: World, search: str, texts: list[str]) -> list[str]:
    """`texts` stored oldest first by one agent (beside memories that hold `coffee` often, so
    that `coffee` is a common word of the index), ranked for `search`."""
    agent = world.agent(world.user("Scorer", "org-score"))
    start = utcnow() - timedelta(hours=1)
    common = [agent_memory(agent, f"coffee at noon {i}", start) for i in range(30)]
    # Each later text has the greater id: a tie ranks it first (order by score, then id).
    at = [start + timedelta(seconds=1 + i) for i in range(len(texts))]
    stored = [
        agent_memory(agent, text, at[i], id=uuid7(int(at[i].timestamp() * 1000)))
        for i, text in enumerate(texts)
    ]
    store.replace_memories(agent.tenant, common + stored, [], start)
    audience = Audience(source_agent_id=uuid.UUID(agent.id), tenant_id=agent.tenant)
    query = filters(search).within((audience,), Order.RELEVANCE)
    content = {m.id: m.content for m in stored}
    return [content[s.id] for s in store.rank_memories(query, limit=len(texts)) if s.id in content]


def test_more_occurrences_rank_higher(store: Store, world: World) -> None:
    texts = ["tea with tea and tea", "tea with a friend"]  # the same length; the weaker newer
    assert _ranked_texts(store, world, "tea", texts) == texts


def test_each_term_counts_more_than_repeating_one(store: Store, world: World) -> None:
    """Every match holds every term (they are ANDed): holding each twice beats holding one three
    times and the other once, whichever word is rarer in the index (bm25 weighed `tea`, the
    rarer here, over `coffee`)."""
    texts = ["coffee tea coffee tea cake", "tea coffee tea tea cake"]
    assert _ranked_texts(store, world, "tea coffee", texts) == texts


def test_a_longer_memory_with_the_same_count_ranks_lower(store: Store, world: World) -> None:
    texts = ["tea in the garden", "tea in the garden with our staff, plants and a printer"]
    assert _ranked_texts(store, world, "tea", texts) == texts
    assert _ranked_texts(store, world, '"the garden" tea', texts) == texts  # a phrase too


def test_sqlite_scores_the_terms_its_match_expression_holds() -> None:
    """SQLite's score reads the search back from the MATCH expression (`fts5_search`): every
    kind of term, with or without a scope token, comes back as parsed."""
    from mnemos.storage.sqlite import fts5_query, fts5_search

    agent = Audience(source_agent_id=uuid.UUID(int=7), tenant_id=uuid.UUID(int=7))
    for text in ["tea", "green tea", 'a "green tea" e tea', '"a a" b']:
        search = parse_search(text, 500)
        assert fts5_search(fts5_query(search)) == search
        assert fts5_search(fts5_query(search, agent)) == search
