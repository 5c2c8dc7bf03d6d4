"""Storage and lock-order leftovers (docs/decisions.md, "Storage and lock-order leftovers"):
a vector saved twice keeps one place in its owners' layout; an erasure deletes idempotency keys
through an index; writes that lock several rows of one kind take them in one order."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from alembic import command
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain.ids import utcnow
from mnemos.domain.ports import Embedder
from mnemos.indexer import drain
from mnemos.storage import alembic_config, migrate, open_store
from mnemos.storage.base import Store
from mnemos.storage.postgres import driver_url
from mnemos.storage.schema import memories, vector_chunks, vector_tail
from tests.conftest import BACKENDS
from tests.test_migration_tuya import fresh_database
from tests.test_recall import (  # noqa: F401 (the session's local embedder)
    AISLE,
    OTHERS,
    Renamed,
    embedder,
    ids,
    put,
    search,
)
from tests.test_vector_search import DIMS, MODEL, agent_memories, unit
from tests.world import World


def _places(store: Store) -> Counter[tuple[str, int]]:
    """How often each (owner key, memory pk) is in the layout: its chunks and its tails."""
    with store._read() as conn:  # type: ignore[attr-defined]
        chunks = conn.execute(sa.select(vector_chunks.c.owner, vector_chunks.c.pks)).all()
        tail = conn.execute(sa.select(vector_tail.c.owner, vector_tail.c.memory_pk)).all()
    places: Counter[tuple[str, int]] = Counter()
    for owner, blob in chunks:
        places.update((owner, pk) for pk in np.frombuffer(bytes(blob), dtype="<i8").tolist())
    places.update((owner, int(pk)) for owner, pk in tail)
    return places


def _three_saved(
    store: Store, world: World, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[uuid.UUID], Any]:
    """Three memories of one agent, saved once: with `CHUNK_ROWS` 2, two are sealed into a
    chunk of each owner key and one waits in its tails."""
    import mnemos.storage.sql_vectors as sql_vectors

    monkeypatch.setattr(sql_vectors, "CHUNK_ROWS", 2)
    agent = world.agent(world.user("Ann", "twice"))
    made = agent_memories(agent, 3)
    store.replace_memories(agent.tenant, made, [], made[0].inserted_at)
    vectors = unit(np.random.default_rng(5).standard_normal((3, DIMS)).astype(np.float32))
    ids = [memory.id for memory in made]
    assert store.save_vectors(MODEL, ids, vectors) == 3
    return ids, vectors


def _once_each(store: Store) -> None:
    places = _places(store)
    with store._read() as conn:  # type: ignore[attr-defined]
        pks = set(conn.execute(sa.select(memories.c.pk)).scalars())
    assert {pk for _, pk in places} == pks
    twice = {place: count for place, count in places.items() if count > 1}
    assert not twice, f"vectors with more than one place in an owner's layout: {twice}"


def test_a_vector_saved_again_keeps_one_place_in_its_owners_layout(
    store: Store, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's lease ran out under a slow endpoint, another worker embedded the same
    memories and saved first; the first then saves too."""
    ids, vectors = _three_saved(store, world, monkeypatch)
    again = store.save_vectors(MODEL, ids, vectors)
    _once_each(store)
    assert again == 0  # nothing new stored


def test_two_saves_of_the_same_vectors_at_once_keep_one_place(
    store: Store, world: World, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two savers of the same memories, their transactions open together (PostgreSQL; SQLite
    runs them one after the other): each memory is stored once, its places once, and neither
    saver fails."""
    ids, vectors = _three_saved(store, world, monkeypatch)
    more = agent_memories(world.agent(world.user("Bob", "twice")), 3)
    store.replace_memories(more[0].tenant_id, more, [], more[0].inserted_at)
    ids = [memory.id for memory in more]
    postgres = settings.resolved_database_url().startswith("postgresql")
    both_open = threading.Barrier(2, timeout=30)
    savers = [open_store(settings) for _ in range(2)]
    for saver in savers:
        if not postgres:
            continue
        lazy = saver._lazy_write  # type: ignore[attr-defined]

        @contextmanager
        def together(*args: Any, _lazy: Any = lazy, **kwargs: Any) -> Iterator[Any]:
            with _lazy(*args, **kwargs) as conn:
                both_open.wait()
                yield conn

        saver._lazy_write = together  # type: ignore[attr-defined]
    try:
        with ThreadPoolExecutor(2) as pool:
            saving = [pool.submit(saver.save_vectors, MODEL, ids, vectors) for saver in savers]
            saved = sorted(future.result() for future in saving)
    finally:
        for saver in savers:
            saver.close()
    _once_each(store)
    assert saved == [0, 3]


KEYS = 20_000


def _plan(conn: sa.Connection, statement: sa.Delete) -> str:
    """The plan the database chooses for `statement` (its values written into the text)."""
    sql = str(statement.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    if conn.dialect.name == "sqlite":
        return "\n".join(row[-1] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql))
    return "\n".join(row[0] for row in conn.exec_driver_sql("EXPLAIN " + sql))


def test_an_erasures_key_deletes_look_keys_up_by_memory(store: Store, world: World) -> None:
    """The tenant holds many keys of other memories; the erasure's deletes of the keys of the
    person's memories (by a SELECT of them, and by a list of pairs) use
    `ix_idempotency_keys_memory`, not a read of the tenant's every key."""
    from mnemos.domain.tenants import Tenants
    from mnemos.storage.schema import idempotency_keys
    from mnemos.storage.sql_rights import keys_of_memories

    ann = world.user("Ann", "keys")
    agent = world.agent(ann)
    tenant = agent.tenant
    person = uuid.UUID(ann.id)
    about = [replace(memory, subject_id=person) for memory in agent_memories(agent, 2)]
    store.replace_memories(tenant, about, [], about[0].inserted_at)
    principal = uuid.UUID(agent.id)
    rows = [
        {
            "tenant_id": tenant,
            "principal_id": principal,
            "key": f"k{n}",
            "fingerprint": "f" * 64,
            "memory_id": about[n].id if n < len(about) else uuid.uuid4(),
            "inserted_at": about[0].inserted_at,
        }
        for n in range(KEYS)
    ]
    with store._write() as conn:  # type: ignore[attr-defined]
        conn.execute(idempotency_keys.insert(), rows)
    reach = Tenants(about=person)
    of_subject = sa.and_(memories.c.tenant_id == tenant, memories.c.subject_id == person)
    forms = [
        keys_of_memories(reach, sa.select(memories.c.tenant_id, memories.c.id).where(of_subject)),
        keys_of_memories(reach, [(tenant, memory.id) for memory in about]),
    ]
    with store._write() as conn:  # type: ignore[attr-defined]
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("ANALYZE idempotency_keys")
            conn.exec_driver_sql("ANALYZE memories")
            conn.exec_driver_sql("ANALYZE subject_tenants")
        plans = [_plan(conn, statement) for statement in forms]
    for plan in plans:
        assert "ix_idempotency_keys_memory" in plan, plan


@pytest.mark.parametrize("backend", BACKENDS)
def test_0028_adds_the_keys_memory_index_and_goes_down_and_up(backend: str, tmp_path: Path) -> None:
    def indexes(url: str) -> set[str]:
        engine = sa.create_engine(driver_url(url))
        try:
            return {index["name"] for index in sa.inspect(engine).get_indexes("idempotency_keys")}
        finally:
            engine.dispose()

    with fresh_database(backend, tmp_path) as url:
        migrate(Settings(database_url=url))
        assert "ix_idempotency_keys_memory" in indexes(url)
        command.downgrade(alembic_config(url), "0027_idempotency_key_sweep")
        assert "ix_idempotency_keys_memory" not in indexes(url)
        command.upgrade(alembic_config(url), "head")
        assert "ix_idempotency_keys_memory" in indexes(url)


def _tuya_writes(store: Store, subjects: list[uuid.UUID], org: uuid.UUID, n: int) -> None:
    """Two writes at once, each superseding a key of both devices, in opposite orders."""
    from tests.test_migration_tuya import tuya_memory

    def write(order: list[uuid.UUID]) -> bool:
        new = [(replace(tuya_memory(s, f"k{n}", 1, 0), tenant_id=org), f"1:k{n}") for s in order]
        return store.put_tuya_memories(new, utcnow())

    with ThreadPoolExecutor(2) as pool:
        writes = [pool.submit(write, order) for order in (subjects, subjects[::-1])]
        assert [future.result() for future in writes] == [True, True]


def test_tuya_writes_over_two_devices_in_opposite_orders_never_deadlock(
    store: Store, world: World, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`put_tuya_memories` locks each device's row before superseding its slots. Two writes of
    the same two devices, given in opposite orders, took them in their own orders: each held
    one and waited for the other's (PostgreSQL aborts one: deadlock detected). The first rounds
    hold each writer after its first device until the other has one too, or for 2 s."""
    if not settings.resolved_database_url().startswith("postgresql"):
        pytest.skip("SQLite has one writer at a time: its writes cannot hold a lock each")
    import mnemos.storage.sql_tuya as sql_tuya

    org = uuid.UUID(world.org("tuya-order"))
    subjects = [store.claim_tuya_device(f"order-{n}", org)[1] for n in range(2)]
    original = sql_tuya.status_change  # called once per device, just after its lock
    held: dict[str, Any] = {}

    def meet_after_the_first_lock(*args: Any) -> Any:
        mine = held.setdefault(threading.current_thread().name, [])
        if not mine:
            mine.append(True)
            with suppress(threading.BrokenBarrierError):
                held["barrier"].wait(timeout=2)
        return original(*args)

    monkeypatch.setattr(sql_tuya, "status_change", meet_after_the_first_lock)
    for n in range(2):
        held.clear()
        held["barrier"] = threading.Barrier(2)
        _tuya_writes(store, subjects, org, n)
    monkeypatch.setattr(sql_tuya, "status_change", original)
    for n in range(2, 40):
        _tuya_writes(store, subjects, org, n)


# --- a server whose embedder is not the one the vectors were made by -----------------------


def test_a_search_by_meaning_says_the_vectors_are_of_another_model(
    store: Store,
    world: World,
    settings: Settings,
    embedder: Embedder,  # noqa: F811
) -> None:
    """The database was reindexed under another embedder (`old`): this server's searches by
    meaning found nothing and said nothing. Now a semantic search's `meta.note` and a hybrid
    search's `fallback` (to keyword) name it; with vectors of its own model, neither does."""
    agent = world.agent(world.user("Ann", "models"))
    old = Renamed(embedder, "old-model@384")
    with TestClient(create_app(settings, store, None)) as plain:
        aisle = put(plain, agent, AISLE)
        put(plain, agent, OTHERS[0])
    assert drain(store, old) == 2
    with TestClient(create_app(settings, store, embedder)) as client:
        semantic = search(client, agent, mode="semantic")
        assert semantic["data"] == []
        assert semantic["meta"]["note"] == "other_model_indexed"
        hybrid = search(client, agent, "aisle seats", mode="hybrid")
        assert ids(hybrid) == [aisle]
        assert hybrid["meta"]["mode"] == "keyword"
        assert hybrid["meta"]["requested_mode"] == "hybrid"
        assert hybrid["meta"]["fallback"] == "other_model_indexed"
        # Another agent with nothing embedded yet: an empty answer, and no note.
        fresh = world.agent(world.user("Bob", "models"))
        assert "note" not in search(client, fresh, mode="semantic")["meta"]
    store.queue_for_model(embedder.model, batch=10)
    drain(store, embedder)
    with TestClient(create_app(settings, store, embedder)) as client:
        semantic = search(client, agent, mode="semantic")
        assert ids(semantic)[0] == aisle and "note" not in semantic["meta"]
        assert "fallback" not in search(client, agent, "aisle seats", mode="hybrid")["meta"]


def test_a_floor_that_leaves_nothing_is_not_read_as_another_model(
    store: Store,
    world: World,
    settings: Settings,
    embedder: Embedder,  # noqa: F811
) -> None:
    """Memories of both models in one agent's scope (a reindex under way): a similarity floor
    that leaves none of this model's nearest is the floor's answer, not `other_model_indexed`
    (the check reads the answer before the floor)."""
    agent = world.agent(world.user("Ann", "floors"))
    with TestClient(create_app(settings, store, None)) as plain:
        aisle = put(plain, agent, AISLE)
    assert drain(store, Renamed(embedder, "old-model@384")) == 1
    with TestClient(create_app(settings, store, None)) as plain:
        put(plain, agent, OTHERS[0])
    assert drain(store, embedder) == 1
    with TestClient(create_app(settings, store, embedder)) as client:
        floored = search(client, agent, mode="semantic", min_score=0.99)
        assert floored["data"] == [] and "note" not in floored["meta"]
        hybrid = search(client, agent, "aisle seats", mode="hybrid", min_score=0.99)
        assert ids(hybrid) == [aisle] and "fallback" not in hybrid["meta"]


def test_a_server_on_another_model_warns_once_as_it_starts(
    store: Store,
    world: World,
    settings: Settings,
    embedder: Embedder,  # noqa: F811
    caplog: Any,
) -> None:
    agent = world.agent(world.user("Ann", "models"))
    with TestClient(create_app(settings, store, None)) as plain:
        put(plain, agent, AISLE)
    drain(store, Renamed(embedder, "old-model@384"))
    with caplog.at_level("WARNING", logger="mnemos"):
        with TestClient(create_app(settings, store, embedder)):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not _model_warnings(caplog):
                time.sleep(0.05)
    (warning,) = _model_warnings(caplog)
    assert "old-model@384" in warning and embedder.model in warning
    assert "mnemos reindex --switch-model" in warning


def _model_warnings(caplog: Any) -> list[str]:
    return [r.getMessage() for r in caplog.records if "recall by meaning:" in r.getMessage()]


def test_doctor_names_the_models_and_the_command_that_mends_them(
    store: Store,
    world: World,
    settings: Settings,
    embedder: Embedder,  # noqa: F811
    database_url: str,
) -> None:
    from tests.test_operations import doctor

    code, findings = doctor(database_url)
    assert code == 0 and findings["vectors"]["level"] == "ok", findings
    agent = world.agent(world.user("Ann", "models"))
    with TestClient(create_app(settings, store, None)) as plain:
        put(plain, agent, AISLE)
    drain(store, Renamed(embedder, "old-model@384"))
    code, findings = doctor(database_url)  # the default embedder: `local`
    assert code == 1 and findings["vectors"]["level"] == "problem", findings
    detail = findings["vectors"]["detail"]
    assert "old-model@384" in detail and embedder.model in detail
    assert "mnemos reindex --switch-model" in detail
    code, findings = doctor(database_url, MNEMOS_EMBEDDER="none")
    assert code == 0 and "old-model@384" in findings["vectors"]["detail"], findings
