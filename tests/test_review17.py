"""Ninth hostile review (review17): races between requests, server processes and commands.

Each test forces one interleaving (a hook that runs the other request at the point where it
races, a held transaction found waited for in `pg_locks`/`pg_stat_activity`), never a sleep
that hopes for an order. Each is a strict xfail that fails today
for the finding's reason (`--runxfail` shows it); docs/decisions.md, "Ninth hostile review:
findings (review17, 2026-12-05)", says what each means and a suggested fix."""

from __future__ import annotations

import io
import resource
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain.models import Status
from mnemos.errors import StorageUnavailable
from mnemos.storage.base import Store
from mnemos.storage.schema import memories, memory_history, vector_chunks
from mnemos.storage.transfer_import import import_database
from tests.api.test_tuya_hardening import Tuya, entry, project, tuya_query  # noqa: F401
from tests.test_review13 import rows_held
from tests.test_transfer import dump
from tests.world import Actor, World, memory_body

BASE = "/api/v1/agent/memories"
ME = "/api/v1/me/memories"
ERASE = "/api/v1/me/memories/erase"


@pytest.fixture
def client(settings: Settings, store: Store) -> Iterator[TestClient]:
    """The app with request threads to spare: a hook runs a second request while the first
    holds its thread (one on PostgreSQL, two on SQLite by default)."""
    with TestClient(create_app(settings.model_copy(update={"worker_threads": 8}), store)) as test:
        yield test


def on_postgres_only(settings: Settings) -> None:
    if settings.database_url.startswith("sqlite"):
        pytest.skip("SQLite runs one writer at a time: the write cannot land inside the other")


def meanwhile(run: Callable[[], Any]) -> Any:
    """Run `run` on a thread of its own (another request, another connection) and wait for it:
    the interleaving a hook forces. Its answer, or its exception raised here."""
    answers: list[Any] = []
    failed: list[BaseException] = []

    def target() -> None:
        try:
            answers.append(run())
        except BaseException as exc:  # noqa: BLE001 - raised below
            failed.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the concurrent request never ended (it waits for the other)"
    if failed:
        raise failed[0]
    return answers[0]


def meanwhile_or_waiting(run: Callable[[], Any], url: str) -> Callable[[], Any]:
    """Run `run` on a thread of its own until it ends or waits for a lock (the caller holds
    one it takes: the fix makes it wait instead of racing); return a function that waits for
    its end once the caller went on, and gives its answer (or raises its exception)."""
    answers: list[Any] = []
    failed: list[BaseException] = []

    def target() -> None:
        try:
            answers.append(run())
        except BaseException as exc:  # noqa: BLE001 - raised by `finish`
            failed.append(exc)

    waiting = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
    )
    thread = threading.Thread(target=target)
    thread.start()
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")  # each poll sees activity anew
    try:
        with engine.connect() as watcher:
            while thread.is_alive() and not watcher.execute(waiting).scalar_one():
                time.sleep(0.01)
    finally:
        engine.dispose()

    def finish() -> Any:
        thread.join(30)
        assert not thread.is_alive(), "the concurrent request never ended"
        if failed:
            raise failed[0]
        return answers[0]

    return finish


def once(original: Callable[..., Any], before: Callable[..., Any]) -> Callable[..., Any]:
    """`original`, with `before(*args, **kwargs)` run first on its first call only."""
    done: list[bool] = []

    def hooked(*args: Any, **kwargs: Any) -> Any:
        if not done and before(*args, **kwargs) is not False:
            done.append(True)
        return original(*args, **kwargs)

    return hooked


def people(world: World, org: str) -> tuple[Actor, Actor]:
    ann = world.user("Ann", org)
    return ann, world.agent(ann)


def stored(client: TestClient, bot: Actor, content: str, **fields: Any) -> str:
    answer = client.post(BASE, json=memory_body(content, **fields), headers=bot.headers)
    assert answer.status_code == 201, answer.text
    memory_id: str = answer.json()["data"]["id"]
    return memory_id


# --- 1. a write that SQLite rolls back whole, in a shared batch ------------------------------


def test_a_write_error_that_rolls_back_the_batch_fails_every_writer_of_it(
    tmp_path: Path,
) -> None:
    """Group commit runs each later block of a batch in a SAVEPOINT, so that its failure takes
    back only its own work. But on an I/O error (`SQLITE_IOERR`: EIO, EDQUOT, EFBIG; or
    `SQLITE_FULL` in a statement without a statement journal) SQLite itself rolls back the
    whole transaction: the failing block's `ROLLBACK TO SAVEPOINT` then fails ("no such
    savepoint"), and the batch's COMMIT, on a connection no longer in a transaction, is a no-op
    in pysqlite, so it "succeeds": the writers of the batch before the failing block return
    (a store's 201) and their rows are gone. Here the second block's statements spill the page
    cache to the WAL, which may not grow (`RLIMIT_FSIZE`: EFBIG, an I/O error as a quota or a
    failing disk gives); the first block is an ordinary store's insert."""
    from mnemos.storage import migrate
    from mnemos.storage.sqlite import SqliteStore
    from tests.test_group_commit import count, insert, queue_behind_a_slow_writer

    url = f"sqlite:///{tmp_path / 'batch.db'}"
    migrate(Settings(database_url=url))
    store = SqliteStore(url)
    wal = tmp_path / "batch.db-wal"

    def spills_and_fails(conn: sa.Connection) -> None:
        from mnemos.domain.models import Scope
        from mnemos.storage.rows import memory_values
        from tests.domain.test_rules import memory

        conn.exec_driver_sql("PRAGMA cache_size=2")  # a large block's pages go to the WAL early
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (wal.stat().st_size + 16_384, limit[1]))
        try:
            for _ in range(300):
                values = {
                    **memory_values(memory(Scope.ORGANIZATION, None, None)),
                    "content": "x" * 3000,
                }
                conn.execute(memories.insert().values(**values))
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, limit)

    ignored = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit: EFBIG
    try:
        outcomes = queue_behind_a_slow_writer(store, [spills_and_fails], first_body=insert)
        stored_rows = count(store)
    finally:
        signal.signal(signal.SIGXFSZ, ignored)
        store.close()
    assert isinstance(outcomes[1], StorageUnavailable), (
        outcomes
    )  # the I/O error, then the savepoint
    told_saved = outcomes[0] is None
    assert not told_saved or stored_rows == 1, (
        f"the first writer was told saved and its row is gone ({outcomes[1].details})"
    )


# --- 2. two key rotations at once -------------------------------------------------------------


def test_a_rotation_leaves_one_key_working_while_another_rotation_runs(
    client: TestClient, world: World, settings: Settings
) -> None:
    """`replace_api_keys` revokes the principal's live keys, then inserts the new one (READ
    COMMITTED). A second rotation running at once (the holder of a leaked key rotating it in a
    loop, as the API allows any key's holder; or the operator's `admin rotate-key` beside the
    person's) revokes the keys its UPDATE's snapshot saw live: the first rotation's new key is
    not among them (uncommitted then), and the old key it waited for is revoked by then. Both
    answer 200 and both new keys work: the person rotated because the key leaked, and the
    leaker's key (here `theirs`, the first rotation's) still reads everything about them. SQLite
    runs the two one after the other, and the second revokes the first's key."""
    on_postgres_only(settings)
    from mnemos.domain.accounts import hash_key, new_key
    from mnemos.storage.postgres import driver_url
    from mnemos.storage.schema import api_keys, users

    ann = world.user("Ann", "r17-rotate")
    theirs = new_key("user")
    engine = sa.create_engine(driver_url(settings.database_url))
    try:
        with engine.connect() as other, other.begin():
            # The other rotation's statements (`replace_api_keys`), not yet committed: since
            # the fix, the first locks the person's row (the person's rotation waits there).
            person = users.c.id == uuid.UUID(ann.id)
            other.execute(sa.select(users.c.id).where(person).with_for_update())
            live = sa.and_(
                api_keys.c.principal_id == uuid.UUID(ann.id), api_keys.c.revoked_at.is_(None)
            )
            other.execute(api_keys.update().where(live).values(revoked_at=sa.func.now()))
            other.execute(
                api_keys.insert().values(
                    key_hash=hash_key(theirs),
                    kind="user",
                    principal_id=uuid.UUID(ann.id),
                    inserted_at=sa.func.now(),
                )
            )
            rotating = threading.Thread(
                target=lambda: answers.append(
                    client.post("/api/v1/me/api-key/rotate", headers=ann.headers)
                )
            )
            answers: list[Any] = []
            rotating.start()
            waits_for_a_lock(other)  # the person's rotation waits for the person's row
        rotating.join(20)
    finally:
        engine.dispose()
    assert answers and answers[0].status_code == 200, answers
    mine = answers[0].json()["data"]["api_key"]
    assert client.get("/api/v1/me/profile", headers={"X-API-Key": mine}).status_code == 200
    leaked = client.get("/api/v1/me/profile", headers={"X-API-Key": theirs})
    assert leaked.status_code == 401, "the other rotation's key works after the person's"


def waits_for_a_lock(holder: sa.Connection) -> None:
    """Return once another session of this database waits for a lock (`holder` has it)."""
    for _ in range(500):
        waiting = holder.execute(
            sa.text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
        ).scalar_one()
        if waiting:
            return
        time.sleep(0.01)
    raise AssertionError("no session waited for the held lock")


# --- 3. an erasure while a merge runs -----------------------------------------------------------


def test_a_person_erased_while_a_merge_runs_keeps_nothing_from_before(
    client: TestClient,
    world: World,
    settings: Settings,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`import --merge` leaves out the file's memories about a person stored before the
    person's erasure (review14's fix), by `Held.erased`, read once before the first row. On
    PostgreSQL the merge is one SERIALIZABLE transaction: an erasure committed by the server
    after that read (the merge of another server's copy takes minutes at 1M) is seen neither by
    `_not_erased` nor by `_held_keys`, and the merge puts back memories about the person stored
    before the erasure that the person was told were erased (count 1 after `erased`). On SQLite
    the merge holds the write lock from its first statement: the erasure waits, then erases
    what was merged."""
    on_postgres_only(settings)
    import mnemos.storage.transfer_import as transfer_import

    ann, bot = people(world, "r17-merge")
    memory_id = stored(client, bot, "Ann's sister is called Berit", subject_id=ann.id)
    copy = dump(database_url)  # another server's copy holds it ...
    engine = sa.create_engine(database_url)
    try:  # ... this one never did (the copy was taken elsewhere)
        with engine.begin() as conn:
            conn.execute(memory_history.delete().where(memory_history.c.memory_id == memory_id))
            conn.execute(memories.delete().where(memories.c.id == memory_id))
    finally:
        engine.dispose()

    def erase(*_: Any) -> None:
        answer = client.post(ERASE, json={"confirm": True}, headers=ann.headers)
        assert answer.status_code == 200, answer.text

    original = transfer_import.held_before
    erasing: list[Callable[[], Any]] = []

    def held_then_erased(conn: sa.Connection) -> Any:
        held = original(conn)  # the merge's first read: its snapshot, and the erasures
        # The erasure runs now; it may wait for the merge (it must not race it).
        erasing.append(meanwhile_or_waiting(erase, database_url))
        return held

    monkeypatch.setattr(transfer_import, "held_before", held_then_erased)
    import_database(database_url, [*io.BytesIO(copy)], merge=True)
    assert erasing, "the hook did not run"
    erasing[0]()  # the erasure ends (after the merge, if it waited for it)

    count = client.get(f"{ME}/count", headers=ann.headers)
    assert count.json()["data"]["count"] == 0, "a memory from before the erasure is back"


# --- 4. a memory stored while its person is erased -----------------------------------------------


def test_a_memory_stored_during_an_erasure_keeps_its_history_or_goes(
    client: TestClient, world: World, store: Store, settings: Settings
) -> None:
    """`erase_subject` is one READ COMMITTED transaction of several statements: the memories'
    DELETE sees those committed when it starts, the history's DELETE (`subject_id = person`)
    those committed when *it* starts. An agent's store about the person (201) committed
    between the two is kept (the memories' DELETE did not see it) and its `created` row is
    deleted (the history's DELETE did): an active memory with no history at all, which the
    person reads (`GET` 200) and whose history answers `[]`. Either outcome is consistent
    (erased with the rest, or kept with its history); this is neither."""
    on_postgres_only(settings)
    ann, bot = people(world, "r17-erase-store")
    stored(client, bot, "Ann takes her coffee black", subject_id=ann.id)
    during: list[str] = []

    def store_about_ann(*_: Any) -> None:
        during.append(stored(client, bot, "Ann moved to Bergen", subject_id=ann.id))

    # Between the memories' DELETE and the history's (the sealed vectors are purged there).
    hooked = once(store._purge_vectors, lambda *_: meanwhile(store_about_ann))  # type: ignore[attr-defined]
    store._purge_vectors = hooked  # type: ignore[attr-defined]
    answer = client.post(ERASE, json={"confirm": True}, headers=ann.headers)
    assert answer.status_code == 200, answer.text
    assert during, "the hook did not run"

    kept = client.get(f"{ME}/{during[0]}", headers=ann.headers)
    history = client.get(f"{ME}/{during[0]}/history", headers=ann.headers)
    events = [row["event"] for row in history.json()["data"]] if kept.status_code == 200 else []
    assert kept.status_code == 404 or events == ["created"], (kept.status_code, events)


# --- 5. a store by an agent its owner is deleting -----------------------------------------------


def test_an_agent_deleted_while_it_stores_leaves_no_memory_of_its_own(
    client: TestClient, world: World, store: Store
) -> None:
    """`DELETE /api/v1/me/agents/{id}` revokes the agent's key and deletes its agent-scoped
    memories in one transaction; a store of that agent authenticated a moment before (its
    request in flight) inserts its memory after, with nothing checked at the insert (no foreign
    key on `source_agent_id`, no recheck of the key). The store answers 201 after the deletion
    answered: an agent-scoped memory of an agent that no longer exists, which no API can
    read or delete (its owner sees the agent-scoped memories of agents they own: none now), kept
    for good. (With `scope: subject`, the memory keeps the deleted agent's id with no
    `source_removed`.) Both backends."""
    ann, bot = people(world, "r17-agent")
    deleted: list[int] = []

    def delete_the_agent(*_: Any) -> None:
        answer = client.delete(f"/api/v1/me/agents/{bot.id}", headers=ann.headers)
        deleted.append(answer.status_code)

    # Between the store's authentication and its insert.
    store.insert_memory = once(store.insert_memory, lambda *_, **__: meanwhile(delete_the_agent))  # type: ignore[method-assign]
    answer = client.post(
        BASE, json=memory_body("my private scratch", scope="agent"), headers=bot.headers
    )
    assert deleted == [200]

    engine = sa.create_engine(store_url(store))
    try:
        with engine.connect() as conn:
            left = conn.execute(
                sa.select(sa.func.count()).where(memories.c.source_agent_id == uuid.UUID(bot.id))
            ).scalar_one()
    finally:
        engine.dispose()
    assert left == 0, f"the store answered {answer.status_code}; the deleted agent's memory stays"


def store_url(store: Store) -> str:
    url = store._write_engine.url  # type: ignore[attr-defined]
    return str(url.render_as_string(hide_password=False))


# --- 6. a person's restore of a memory its agent supersedes -------------------------------------


def test_a_memory_superseded_while_its_person_restores_it_stays_superseded(
    client: TestClient, world: World, store: Store
) -> None:
    """`HumanMemoryService.set_status` refuses to restore a memory that is not archived (422
    `memory_not_archived`) on what it read; `set_memory_status` then updates with `status <>
    'active'` only. The agent's supersede committed between the two (two requests of two
    callers, any two threads or processes) is undone: the person's restore answers 200
    `active`, and the memory the agent marked wrong is back in every default list and search;
    history `created, archived, superseded, restored`. Both backends."""
    ann, bot = people(world, "r17-restore")
    memory_id = stored(client, bot, "Ann's flight is on Tuesday", subject_id=ann.id)
    assert client.post(f"{ME}/{memory_id}/archive", headers=ann.headers).status_code == 200

    def supersede(_tenant: Any, _id: Any, status: Status, *_: Any, **__: Any) -> bool:
        if status is not Status.ACTIVE:
            return False  # only the restore's update is raced
        answer = meanwhile(
            lambda: client.post(f"{BASE}/{memory_id}/supersede", headers=bot.headers)
        )
        assert answer.status_code == 200, answer.text
        return True

    store.set_memory_status = once(store.set_memory_status, supersede)  # type: ignore[method-assign]
    restored = client.post(f"{ME}/{memory_id}/restore", headers=ann.headers)

    now = client.get(f"{ME}/{memory_id}", headers=ann.headers).json()["data"]["status"]
    assert now == "superseded", f"restore answered {restored.status_code}"


# --- 7. two keyword searches when the term estimates expire (SQLite) --------------------------


def test_a_search_in_flight_survives_another_clearing_the_term_estimates(
    client: TestClient, world: World, store: Store, settings: Settings
) -> None:
    """`SqliteStore._term_stats` keeps each term range's page count in `self._pages` for
    `STATS_SECONDS` (60 s), shared by the process's request threads with no lock. A search
    notes which of its ranges are missing, reads those (a query: the interpreter lock is
    released), stores them, then sums `self._pages[span]` over *all* its ranges. Another
    search arriving once the minute is up clears the cache first: the first search's ranges
    that were cached when it looked are gone, and its sum raises `KeyError`, an unhandled 500
    for a plain `content_query` list. With two request threads and steady searches, about one
    search a minute can meet it. Here the first search's `alpha` range is cached, its `bravo`
    range missing; the other search runs while `bravo` is read, a minute after the estimates."""
    if not settings.database_url.startswith("sqlite"):
        pytest.skip("PostgreSQL's estimates are one immutable snapshot (`_lexeme_stats`)")
    _, bot = people(world, "r17-stats")
    stored(client, bot, "alpha bravo charlie", scope="agent")
    listed = client.get(BASE, params={"content_query": "alpha"}, headers=bot.headers)
    assert listed.status_code == 200, listed.text  # `alpha`'s range is cached now

    original = store._term_stats  # type: ignore[attr-defined]
    done: list[bool] = []

    def another_search() -> Any:
        store._stats_at -= 61  # type: ignore[attr-defined]  # a minute after the estimates
        return client.get(BASE, params={"content_query": "charlie"}, headers=bot.headers)

    class AnotherSearchMeanwhile:
        """The first search's connection: the other search runs while `bravo` is read."""

        def __init__(self, conn: sa.Connection):
            self.conn = conn

        def exec_driver_sql(self, statement: str, *args: Any) -> Any:
            if "memories_fts_idx" in statement and not done:
                done.append(True)
                other = meanwhile(another_search)
                assert other.status_code == 200, other.text
            return self.conn.exec_driver_sql(statement, *args)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.conn, name)

    def term_stats(conn: sa.Connection, search: Any) -> Any:
        if not done:  # the first search only (the other starts after `done`)
            conn = AnotherSearchMeanwhile(conn)  # type: ignore[assignment]
        return original(conn, search)

    store._term_stats = term_stats  # type: ignore[attr-defined]
    answer = client.get(BASE, params={"content_query": "alpha bravo"}, headers=bot.headers)
    assert done, "the hook did not run"
    assert answer.status_code == 200, answer.text


# --- 8. Tuya's clear-all beside a delete of one key ---------------------------------------------


def test_tuya_clear_all_deletes_everything_while_a_key_is_deleted(
    client: TestClient,
    project: dict[str, Any],  # noqa: F811
    store: Store,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`delete_tuya_memories` deletes `DELETE_BATCH` (1,000) rows a transaction and stops at
    the first batch that deleted fewer. A row of the batch deleted by another transaction
    while this one waited for it (a delete of that one key, by another role or a retry,
    committed meanwhile) is skipped after the wait, so the batch is short and the clear ends
    after it: `DELETE ... clear_all_memory=true` answers `success: true` while every memory of
    the later batches is still there, listed and searchable (review13's finding 3, fixed for
    retention's loops, in Tuya's). Here the batch is 2 and the device holds 4 keys."""
    on_postgres_only(settings)
    import mnemos.domain.tuya as tuya_domain
    from mnemos.domain.tuya_auth import TuyaCaller

    monkeypatch.setattr(tuya_domain, "DELETE_BATCH", 2)
    tuya = Tuya(client, project)
    keys = [f"sys.memoryK{n}" for n in range(4)]
    assert tuya.write("dev1", [entry(key, f"value {key}") for key in keys])["success"] is True
    _, subject = store.claim_tuya_device("dev1", project["org"])
    caller = TuyaCaller(project["client_id"], project["org"])

    def clear() -> int:
        answer = tuya.call("DELETE", "dev1", {"bind_role_type": 2, "clear_all_memory": "true"})
        assert answer["success"] is True, answer
        return 1

    with rows_held(settings, project["org"], clear, "the clear's delete") as (other, waited, _):
        # The other transaction deletes the key of the row the clear waits for, and commits.
        other.execute(memories.delete().where(memories.c.id == waited))
    left = store.count_memories(tuya_query(caller, subject))
    assert left == 0, f"clear-all answered true; {left} memories are left"


# --- 9. the embedding worker seals a chunk while an erasure runs --------------------------------


def test_no_sealed_vector_of_an_erased_memory_remains_after_a_concurrent_save(
    client: TestClient,
    world: World,
    store: Store,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`erase_subject` reads the layout owners holding the person's vectors
    (`_vector_owners`), deletes the memories, then rewrites those owners' sealed chunks
    (`_purge_vectors`: "no sealed copy of an erased vector remains"). The embedding worker's
    save of the person's queued memories, committed between the owners' read and the DELETE
    (the save locks the rows FOR KEY SHARE only while it runs; the erasure's DELETE then waits
    for nothing), fills and seals a chunk of an owner the erasure did not read: the erased
    memories' int8 vectors stay in `vector_chunks` until the idle sweep reaches them (a full
    pass takes about 20 minutes at 1M). The vectors are never served (every candidate is
    checked against `memories`), but the erasure's promise is that none is kept. Here
    `CHUNK_ROWS` is 2, so two vectors seal a chunk (128 in the code)."""
    on_postgres_only(settings)
    import mnemos.storage.sql_vectors as sql_vectors

    monkeypatch.setattr(sql_vectors, "CHUNK_ROWS", 2)
    ann, bot = people(world, "r17-seal")
    ids = [uuid.UUID(stored(client, bot, f"Ann note {n}", subject_id=ann.id)) for n in range(2)]
    vectors = np.ones((2, 384), dtype=np.float32) / np.sqrt(384)

    def worker_saves(*_: Any) -> None:
        assert meanwhile(lambda: store.save_vectors("test-model", ids, vectors)) == 2  # type: ignore[attr-defined]

    # The worker's save commits just before the erasure's DELETE (after whatever the erasure
    # read before it: the review hooked its read of the owners, `_vector_owners`, which the
    # fix no longer runs on PostgreSQL).
    original = store._delete_counted  # type: ignore[attr-defined]
    done: list[bool] = []

    def save_then_delete(*args: Any) -> Any:
        if not done:
            done.append(True)
            worker_saves()
        return original(*args)

    store._delete_counted = save_then_delete  # type: ignore[attr-defined]
    answer = client.post(ERASE, json={"confirm": True}, headers=ann.headers)
    assert answer.status_code == 200 and answer.json()["data"]["erased"] == 2, answer.text
    assert done, "the hook did not run"

    engine = sa.create_engine(store_url(store))
    try:
        with engine.connect() as conn:
            chunks = conn.execute(sa.select(vector_chunks.c.pks)).scalars().all()
    finally:
        engine.dispose()
    sealed = [np.frombuffer(bytes(blob), dtype="<i8").tolist() for blob in chunks]
    assert sealed == [], f"chunks of erased memories remain: {sealed}"


def test_the_sweep_does_not_write_back_a_vector_an_erasure_purged(
    client: TestClient,
    world: World,
    store: Store,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The idle sweep (`compact_vectors`) rewrites a chunk that holds a deleted memory's key:
    `_drop_dead` reads the chunk and which of its keys are alive with plain SELECTs, then
    writes the chunk back. An erasure whose purge rewrote the same chunk in between (committed
    before the sweep's UPDATE) is overwritten: the sweep's version, computed while the erased
    memory was alive, puts its vector back in `vector_chunks` until the sweep's next pass. The
    chunk here is an agent's subject memories (`as<agent>`), about Ann and about Bob, one of
    Bob's deleted; `CHUNK_ROWS` is 3."""
    on_postgres_only(settings)
    import mnemos.storage.sql_vectors as sql_vectors

    monkeypatch.setattr(sql_vectors, "CHUNK_ROWS", 3)
    ann, bot = people(world, "r17-sweep")
    bob = world.user("Bob", "r17-sweep")
    about = [ann.id, bob.id, bob.id]
    ids = [uuid.UUID(stored(client, bot, f"note {n}", subject_id=s)) for n, s in enumerate(about)]
    vectors = np.ones((3, 384), dtype=np.float32) / np.sqrt(384)
    assert store.save_vectors("test-model", ids, vectors) == 3  # type: ignore[attr-defined]
    gone = client.delete(f"{ME}/{ids[2]}", headers=bob.headers)  # the chunk now holds a dead key
    assert gone.status_code == 204, gone.text
    engine = sa.create_engine(store_url(store))
    try:
        with engine.connect() as conn:
            erased_pk = conn.execute(
                sa.select(memories.c.pk).where(memories.c.id == ids[0])
            ).scalar_one()
    finally:
        engine.dispose()

    sweeping = threading.current_thread()
    original = store._drop_dead  # type: ignore[attr-defined]
    done: list[Callable[[], Any]] = []

    class ErasedBeforeTheWrite:
        """The sweep's connection: Ann's erasure runs just before its UPDATE (and commits, or
        waits for the sweep's lock on the chunk: then it purges what the sweep wrote)."""

        def __init__(self, conn: sa.Connection):
            self.conn = conn

        def execute(self, statement: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(statement, sa.Update) and not done:
                done.append(
                    meanwhile_or_waiting(
                        lambda: client.post(ERASE, json={"confirm": True}, headers=ann.headers),
                        store_url(store),
                    )
                )
            return self.conn.execute(statement, *args, **kwargs)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.conn, name)

    def drop_dead(conn: sa.Connection, *args: Any) -> None:
        if threading.current_thread() is sweeping:
            conn = ErasedBeforeTheWrite(conn)  # type: ignore[assignment]
        original(conn, *args)

    store._drop_dead = drop_dead  # type: ignore[attr-defined]
    store.compact_vectors(None, 100)  # type: ignore[attr-defined]
    assert done, "the sweep rewrote no chunk"
    erased = done[0]()
    assert erased.status_code == 200, erased.text

    engine = sa.create_engine(store_url(store))
    try:
        with engine.connect() as conn:
            chunks = conn.execute(sa.select(vector_chunks.c.pks)).scalars().all()
    finally:
        engine.dispose()
    sealed = [np.frombuffer(bytes(blob), dtype="<i8").tolist() for blob in chunks]
    assert not any(erased_pk in keys for keys in sealed), f"erased pk {erased_pk} in {sealed}"
