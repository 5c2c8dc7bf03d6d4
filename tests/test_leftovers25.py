"""Two storage leftovers (docs/decisions.md, "A vector save never deadlocks an erasure; the
statement cache evicts one shape at a time"): the embedding worker's save passes over memories
being deleted instead of waiting for them, and the compiled-statement cache is a bounded LRU."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from mnemos.config import Settings
from mnemos.domain.history import by_operator
from mnemos.domain.ids import utcnow, uuid7
from mnemos.domain.models import Erasure, Memory, MemoryType, Scope, Segment, System
from mnemos.domain.queries import Audience, MemoryQuery
from mnemos.storage.base import Store
from mnemos.storage.schema import memories, memory_vectors, vector_queue
from mnemos.storage.statement_cache import StatementCache
from tests.test_review17 import store_url
from tests.test_vector_search import DIMS, MODEL, unit
from tests.world import Actor, World, agent_memory

WAITING = sa.text(
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
    " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
)


def _on_postgres_only(settings: Settings) -> None:
    if not settings.resolved_database_url().startswith("postgresql"):
        pytest.skip("SQLite has one writer at a time: a save and an erasure never overlap")


def _about(bot: Actor, org: str, person: uuid.UUID, count: int) -> list[Memory]:
    """`count` memories about `person`, scopes alternating: a save took them by id, an erasure
    takes them by `ix_memories_subject_scope_order` (the organization's first, then by time)."""
    at = utcnow()
    made = []
    for n in range(count):
        when = at + timedelta(milliseconds=n)
        scope = (Scope.SUBJECT, Scope.ORGANIZATION)[n % 2]
        owner = uuid.UUID(org) if scope is Scope.ORGANIZATION else None
        fields: dict[str, Any] = {"scope": scope, "subject_id": person, "organization_id": owner}
        made.append(agent_memory(bot, f"note {n}", when, **fields))
    return made


def _a_large_tenant(store: Store, world: World, name: str) -> tuple[Actor, str]:
    """An agent of the organization `name` (and its id) holding 5,000 other memories, analyzed:
    the planner reads by index as in a deployment (a save's memories by `ix_memories_id`, a
    person's by `ix_memories_subject_scope_order`), not by a scan of a small table."""
    bot = world.agent(world.user("Owner", name))
    at = utcnow()
    for batch in range(5):
        fill = [agent_memory(bot, f"filler {batch} {n}", at) for n in range(1000)]
        store.replace_memories(bot.tenant, fill, [], at)
    with store._write() as conn:  # type: ignore[attr-defined]
        conn.execute(sa.text("ANALYZE memories"))
    return bot, world.org(name)


def _in_thread(run: Callable[[], Any]) -> Callable[[], Any]:
    """Start `run` on a thread; return a function that waits for it and gives its answer or
    the exception it raised (not raised: the test tells which side failed)."""
    answer: list[Any] = []

    def target() -> None:
        try:
            answer.append(run())
        except Exception as exc:  # noqa: BLE001 - returned to the test
            answer.append(exc)

    thread = threading.Thread(target=target)
    thread.start()

    def finish() -> Any:
        thread.join(30)
        assert not thread.is_alive(), "it never ended"
        return answer[0]

    return finish


@contextmanager
def _watcher(url: str) -> Iterator[sa.Connection]:
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def _until(condition: Callable[[], bool], deadline: float = 10) -> bool:
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def test_a_save_during_its_persons_erasure_never_makes_the_erasure_the_deadlock_victim(
    store: Store, world: World, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Y about Ann is stored; the erasure's DELETE takes it. X about Ann (its id made first,
    stored later) commits while the erasure runs. The worker's save of both locked them by id:
    X, then it waited for Y (being deleted). The erasure's second DELETE (of what was stored
    meanwhile: `_erase_stored_meanwhile`) then waited for X: once the save had waited past
    `deadlock_timeout` (its own check found no cycle yet), the erasure's check aborted the
    erasure (`deadlock detected`: the person's erasure failed). Now the save locks X, passes
    over Y and commits; the erasure erases both."""
    _on_postgres_only(settings)
    bot, _ = _a_large_tenant(store, world, "l25-victim")
    ann = uuid.UUID(world.user("Ann", "l25-victim").id)
    x_made = agent_memory(bot, "X", scope=Scope.SUBJECT, subject_id=ann)
    time.sleep(0.002)  # X's id (uuid7) is the older
    y_made = agent_memory(bot, "Y", scope=Scope.SUBJECT, subject_id=ann)
    store.replace_memories(bot.tenant, [y_made], [], y_made.inserted_at)
    x, y = x_made.id, y_made.id
    assert x < y
    vectors = unit(np.random.default_rng(1).standard_normal((2, DIMS)).astype(np.float32))
    url = store_url(store)
    original = store._erase_stored_meanwhile  # type: ignore[attr-defined]
    saved: list[Callable[[], Any]] = []

    def save_meanwhile(*args: Any) -> Any:
        store.replace_memories(bot.tenant, [x_made], [], x_made.inserted_at)
        saved.append(_in_thread(lambda: store.save_vectors(MODEL, [x, y], vectors)))  # type: ignore[attr-defined]
        with _watcher(url) as watch:
            if _until(lambda: watch.execute(WAITING).scalar_one() == 1, deadline=2):
                # The premise: the save holds X while it waits for Y.
                with pytest.raises(sa.exc.OperationalError, match="could not obtain lock"):
                    watch.execute(
                        sa.select(memories.c.pk)
                        .where(memories.c.id == x)
                        .with_for_update(nowait=True)
                    )
                time.sleep(1.5)  # past the save's deadlock check (`deadlock_timeout`: 1 s)
        return original(*args)

    monkeypatch.setattr(store, "_erase_stored_meanwhile", save_meanwhile)
    erasure = Erasure(uuid7(), ann, by_operator(), utcnow())
    erased = _in_thread(lambda: store.erase_subject(erasure))()
    assert saved, "the hook did not run"
    saved_count = saved[0]()
    assert erased == 2, f"the erasure failed: {erased!r}"
    assert saved_count == 1, saved_count  # X; Y, being erased, was passed over
    with store._read() as conn:  # type: ignore[attr-defined]
        about_ann = sa.select(memories.c.pk).where(memories.c.subject_id == ann)
        assert conn.execute(about_ann).all() == []
        pks = set(conn.execute(sa.select(memories.c.pk)).scalars())
        for table in (memory_vectors, vector_queue):
            left = set(conn.execute(sa.select(table.c.memory_pk)).scalars())
            assert left <= pks, f"{table.name} keeps an erased memory's row"


def test_saves_racing_their_persons_erasures_never_deadlock(
    store: Store, world: World, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unforced: 40 rounds of a save of a person's 60 memories started with the erasure's
    DELETE (a few ms apart either way). On main some rounds deadlocked (PostgreSQL aborted
    the save or the erasure); now none does, every erasure erases all 60, and no vector or
    queue row of an erased memory is left."""
    _on_postgres_only(settings)
    bot, org = _a_large_tenant(store, world, "l25-race")
    original = type(store)._delete_counted  # type: ignore[attr-defined]
    start: list[threading.Barrier] = []

    def started_with_the_save(self: Any, *args: Any) -> Any:
        start[0].wait(5)
        time.sleep(random.uniform(0, 0.003))  # noqa: S311 - which side goes first varies
        return original(self, *args)

    monkeypatch.setattr(type(store), "_delete_counted", started_with_the_save)
    failures = []
    for n in range(40):
        person = uuid.UUID(world.user(f"Person {n}", "l25-race").id)
        made = _about(bot, org, person, 60)
        store.replace_memories(bot.tenant, made, [], made[0].inserted_at)
        ids = [memory.id for memory in made]
        vectors = unit(np.random.default_rng(n).standard_normal((60, DIMS)).astype(np.float32))
        start[:] = [threading.Barrier(2)]

        def save(ids: list[uuid.UUID] = ids, vectors: Any = vectors) -> int:
            start[0].wait(5)
            return store.save_vectors(MODEL, ids, vectors)  # type: ignore[attr-defined,no-any-return]

        saved = _in_thread(save)
        erasure = Erasure(uuid7(), person, by_operator(), utcnow())
        erased = _in_thread(lambda erasure=erasure: store.erase_subject(erasure))
        answers = {"save": saved(), "erasure": erased()}
        failures += [f"{n}: {k} {v!r}" for k, v in answers.items() if isinstance(v, Exception)]
        if not isinstance(answers["erasure"], Exception):
            assert answers["erasure"] == 60
    assert failures == []
    with store._read() as conn:  # type: ignore[attr-defined]
        pks = set(conn.execute(sa.select(memories.c.pk)).scalars())
        for table in (memory_vectors, vector_queue):
            left = set(conn.execute(sa.select(table.c.memory_pk)).scalars())
            assert left <= pks, f"{table.name} keeps an erased memory's row"


# --- the compiled-statement cache --------------------------------------------------------------


def test_the_statement_cache_evicts_the_least_recently_used_shape_only() -> None:
    """Past its bound the cache dropped every shape (`_remember` cleared the dict), the
    statements every request uses among them; now only the shape used longest ago goes."""
    cache = StatementCache(size=4)
    cache.put(("remember", "search_pages"), "kept")
    for n in range(10):
        cache.put(("list", n), n)
        assert cache.get(("remember", "search_pages")) == "kept"  # used meanwhile: kept
        assert len(cache) <= 4
    assert list(cache) == [("list", 7), ("list", 8), ("list", 9), ("remember", "search_pages")]
    assert cache.get(("list", 6)) is None


def test_one_tenant_cycling_shapes_keeps_the_statements_others_use(
    store: Store, world: World
) -> None:
    """Through the store: one list, then 600 lists of other shapes (filters set or not, x one
    to three audiences: more than the cache's 512), the first listed again every few: its
    statement is the one built first, not rebuilt after the cache was emptied."""
    agent = world.agent(world.user("Ann", "l25-cache"))
    store.replace_memories(agent.tenant, [agent_memory(agent, "tea")], [], utcnow())
    audience = Audience(source_agent_id=uuid.UUID(agent.id), tenant_id=agent.tenant)
    mine = MemoryQuery(audiences=(audience,))
    statements = store._statements  # type: ignore[attr-defined]
    some = uuid.uuid4()
    values: dict[str, Any] = {
        "system": System.LONG_TERM,
        "type": MemoryType.SEMANTIC,
        "segment": Segment.USER,
        "subject_id": some,
        "source_agent_id": some,
        "chat_room_id": some,
        "memory_id": some,
        "memory_ids": (some,),
    }
    names = list(values)
    store.list_memories(mine, limit=5)
    (shape,) = set(statements)
    built = statements.get(shape)
    for n in range(600):
        audiences, chosen = 1 + n // 256, n % 256
        filters = {name: values[name] for i, name in enumerate(names) if chosen >> i & 1}
        store.list_memories(replace(mine, audiences=(audience,) * audiences, **filters), limit=5)
        if n % 10 == 0:
            store.list_memories(mine, limit=5)
    assert len(set(statements)) <= 512
    assert statements.get(shape) is built
