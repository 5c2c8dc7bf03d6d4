"""Eleventh hostile review (review19): this session's fixes (the writer gate above all).

Each test states the behaviour the finding asks for and is a strict xfail: it fails today for the
finding's reason (docs/decisions.md, "Eleventh hostile review: findings (review19, 2026-12-05)").
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from anyio import CapacityLimiter
from fastapi.testclient import TestClient

from mnemos.config import Settings
from mnemos.storage import sqlite
from mnemos.storage.base import Store
from mnemos.storage.schema import memories, vector_chunks
from tests.api.test_tuya_hardening import Tuya, entry, project, tuya_query  # noqa: F401
from tests.api.test_ui_http import signed_in
from tests.test_recall import acme  # noqa: F401
from tests.test_remote_probe import QUESTION, WAIT, HeldServer, endpoint, in_thread, served
from tests.test_remote_probe import stored as stored_and_embedded
from tests.test_review13 import rows_held
from tests.test_review17 import meanwhile_or_waiting, on_postgres_only, store_url
from tests.test_review18 import HELD_FOR, _all_ended, _in_thread, deletions_held
from tests.world import Actor, World, memory_body

AGENT_MEMORIES = "/api/v1/agent/memories"
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def _until(condition: Callable[[], bool], what: str) -> None:
    """Wait (a condition, with a deadline) until `condition()` holds."""
    deadline = time.monotonic() + HELD_FOR
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _rights_threads(client: TestClient) -> CapacityLimiter:
    """The process's rights threads, made now if no request made them yet."""
    state = client.app.state  # type: ignore[attr-defined]
    if getattr(state, "rights_threads", None) is None:

        async def make() -> CapacityLimiter:
            return CapacityLimiter(2)  # `api.rights.RIGHTS_THREADS`, made on the loop

        state.rights_threads = client.portal.call(make)  # type: ignore[union-attr]
    limiter: CapacityLimiter = state.rights_threads
    return limiter


# --- 1. an erasure waiting for a rights thread closes the writer gate ---------------------------


def test_an_erasure_waiting_for_a_rights_thread_does_not_close_the_gate(
    client: TestClient, store: Store, world: World
) -> None:
    """`run_long_write` closes the writer gate (`async with gate.held()`) and only then waits
    for one of the two rights threads. Since this session those threads also run agent
    deletions (every batch, the whole deletion in one `to_thread.run_sync`) and Tuya's
    clear-alls (its whole loop), which were moved there precisely so as not to close the gate:
    two large agent deletions of any tenants (or one and an export batch) hold both threads for
    their whole length, and one person's erasure (of nothing: a person with no memory at all)
    queued behind them closes the gate for all that time. Every POST/PUT/PATCH/DELETE of every
    tenant of the process then waits on the event loop though nothing holds SQLite's writer
    but the deletions' short batches. Here the two threads are taken by the test (standing for
    two deletions in progress). Suggested: take the thread first, then close the gate (inside
    the thread's token: `async with threads:` then `gate.held()` around a `run_sync` with a
    limiter of its own), or have the deletions' batches run under the same gate."""
    if not isinstance(store, sqlite.SqliteStore):
        pytest.skip("the gate closes only on SQLite (one writer)")
    portal = client.portal
    assert portal is not None
    threads = _rights_threads(client)
    holders = [object(), object()]
    for holder in holders:
        portal.call(threads.acquire_on_behalf_of, holder)
    ann = world.user("Ann", "Acme")
    gus = world.agent(world.user("Gus", "Globex"))
    answers: dict[str, int] = {}
    started: list[threading.Thread] = []

    def erase() -> None:
        erased = client.post(
            "/api/v1/me/memories/erase", json={"confirm": True}, headers=ann.headers
        )
        answers["erase"] = erased.status_code

    def store_as_gus() -> None:
        stored = client.post(AGENT_MEMORIES, json=memory_body("x"), headers=gus.headers)
        answers["store"] = stored.status_code

    async def release() -> None:
        for holder in holders:
            threads.release_on_behalf_of(holder)

    gate = client.app.state.writer_gate  # type: ignore[attr-defined]
    try:
        _in_thread(erase, started)
        _until(lambda: threads.statistics().tasks_waiting == 1, "the erasure never queued")
        writer = _in_thread(store_as_gus, started)
        # Either the store is answered, or it waits at the gate: both are conditions.
        _until(lambda: not writer.is_alive() or gate.waiting >= 1, "the store neither")
        served = not writer.is_alive()
    finally:
        portal.call(release)
        _all_ended(started)
    assert served and answers.get("store") == 201, answers
    assert answers["erase"] == 200, answers


# --- 2. MCP reads wait at the gate ----------------------------------------------------------------


def test_an_mcp_read_does_not_wait_for_another_tenants_erasure(
    client: TestClient, store: Store, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer gate lets reads through by HTTP method (`READS`: GET, HEAD, OPTIONS). Every
    MCP request is `POST /mcp`, reads included (`list_memories`, `search_memories`,
    `get_memory`, even `initialize` and `tools/list`): while one person's erasure runs (seconds
    for a large person on SQLite, review18's figures), every agent of every tenant that uses
    Mnemos through MCP is stalled, exactly review18's finding 4 for the REST API. Suggested:
    let `/mcp` (and any POST that only reads) through the gate and gate its writing tools where
    they write (e.g. the store's own wait), or gate by route, not by method."""
    if not isinstance(store, sqlite.SqliteStore):
        pytest.skip("the gate closes only on SQLite (one writer)")
    ann = world.user("Ann", "Acme")
    about_ann = client.post(
        AGENT_MEMORIES,
        json=memory_body("Ann prefers email", subject_id=ann.id),
        headers=world.agent(ann).headers,
    )
    assert about_ann.status_code == 201, about_ann.text
    ivy = world.agent(world.user("Ivy", "Initech"))
    answers: dict[str, Any] = {}
    started: list[threading.Thread] = []
    gate = client.app.state.writer_gate  # type: ignore[attr-defined]
    with deletions_held(monkeypatch) as held:

        def erase() -> None:
            erased = client.post(
                "/api/v1/me/memories/erase", json={"confirm": True}, headers=ann.headers
            )
            answers["erase"] = erased.status_code

        def mcp_list() -> None:
            listed = client.post(
                "/mcp",
                json={
                    "jsonrpc": "2.0",
                    "id": 7,
                    "method": "tools/call",
                    "params": {"name": "list_memories", "arguments": {}},
                },
                headers={**MCP_HEADERS, **ivy.headers},
            )
            answers["mcp"] = listed.status_code

        _in_thread(erase, started)
        assert held.wait(HELD_FOR)
        reader = _in_thread(mcp_list, started)
        _until(lambda: not reader.is_alive() or gate.waiting >= 1, "the MCP read neither")
        served = not reader.is_alive()
    _all_ended(started)
    assert served and answers["mcp"] == 200, answers


# --- 3. the page's search still waits for the embeddings endpoint in a request thread -----------

_ = endpoint  # the fixture, imported


def test_a_slow_endpoint_holds_no_request_thread_for_the_pages_search(
    settings: Settings,
    store: Store,
    acme: dict[str, Actor],  # noqa: F811
    endpoint: HeldServer,  # noqa: F811
) -> None:
    """The fix of "A search waits for an embeddings endpoint before it holds anything" covers
    the REST search routes (`api.params.search_request`) and names MCP's tool as not covered;
    the page's Search (`GET /ui/?q=...`, `ui.memories.search_page`: hybrid) is not named and
    is not covered either: its route is a plain `def`, and `HumanMemoryService.recall` gets no
    probe, so the query is embedded beside the reads in the request thread, inside the
    person's `snapshot()`. With one request thread (PostgreSQL's default), a person typing in
    the page's search box while the endpoint is slow (up to `MNEMOS_EMBEDDER_TIMEOUT_SECONDS`)
    stops every request of every tenant of the process, as the REST search did before the fix.
    Here another organization's agent lists its memories while the page's search waits.
    Suggested: the page's route async, its query embedded first as `search_request` does
    (`Recall.embeds_elsewhere` / `embedded_first` on `remote_embed_threads`), then the page
    built in a thread with the probe."""
    writer, ann, outsider = acme["writer"], acme["ann"], acme["outsider"]
    with served(settings, store, endpoint) as client:
        embedder = client.app.state.services.memories.recall.embedder  # type: ignore[attr-defined]
        stored_and_embedded(client, store, embedder, writer)
        signed_in(client, ann)
        searching, searched = in_thread(lambda: client.get("/ui/", params={"q": QUESTION}))
        try:
            assert endpoint.asked.wait(WAIT)
            listing, listed = in_thread(
                lambda: client.get("/api/v1/agent/memories", headers=outsider.headers)
            )
            listing.join(WAIT)
            answered = bool(listed) and listed[0].status_code == 200
            waiting = searching.is_alive()
        finally:
            endpoint.release.set()  # whatever failed: the search ends before the app stops
            searching.join(WAIT)
            listing.join(WAIT)
    assert searched and searched[0].status_code == 200, searched
    assert answered and waiting, (answered, waiting)  # the list answered while the search waited


# --- 4. Tuya's clear-all ends when another delete took its whole batch ---------------------------


def test_tuya_clear_all_deletes_everything_when_a_key_delete_takes_its_whole_batch(
    client: TestClient,
    project: dict[str, Any],  # noqa: F811
    store: Store,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """review17's finding 8 was fixed by running the clear until a batch deletes nothing
    (`count == 0`). On PostgreSQL a batch whose rows were *all* deleted by another transaction
    while the clear's DELETE waited for them (its `pk IN (SELECT ... LIMIT batch)` was read
    before) also deletes nothing, and the clear ends there: `success: true` with the rest of
    the device's memories kept. A key's versions are consecutive rows (each write of a key
    adds one), so a device that deletes one key (`memory_keys=...`, or another role) while its
    clear-all runs takes a whole batch whenever the key has at least `DELETE_BATCH` (1,000)
    versions among the first rows the clear picks. Here the batch is 2: key K0 written twice
    (two versions, the first two rows), K1 and K2 once; the other transaction deletes K0's two
    rows, the clear's whole first batch. Suggested: end on a batch whose SELECT found nothing
    (select the pks first, then delete them by pk), not on a DELETE that deleted nothing."""
    on_postgres_only(settings)
    import mnemos.domain.tuya as tuya_domain
    from mnemos.domain.tuya_auth import TuyaCaller

    monkeypatch.setattr(tuya_domain, "DELETE_BATCH", 2)
    tuya = Tuya(client, project)
    for value in ("first", "second"):
        assert tuya.write("dev1", [entry("sys.memoryK0", value)])["success"] is True
    later = [entry(f"sys.memoryK{n}", f"value {n}") for n in (1, 2)]
    assert tuya.write("dev1", later)["success"] is True
    _, subject = store.claim_tuya_device("dev1", project["org"])
    caller = TuyaCaller(project["client_id"], project["org"])
    assert store.count_memories(tuya_query(caller, subject)) == 4

    def clear() -> int:
        answer = tuya.call("DELETE", "dev1", {"bind_role_type": 2, "clear_all_memory": "true"})
        assert answer["success"] is True, answer
        return 1

    key_k0 = memories.c.tuya_slot.like("%sys.memoryK0")
    with rows_held(settings, project["org"], clear, "the clear's delete") as (other, waited, _):
        k0 = set(other.execute(sa.select(memories.c.id).where(key_k0)).scalars())
        assert waited in k0  # the clear's first batch is K0's versions (the first rows)
        # The key's own delete (what `memory_keys=K0` runs), committed while the clear waits.
        other.execute(memories.delete().where(key_k0))
    left = store.count_memories(tuya_query(caller, subject))
    assert left == 0, f"clear-all answered true; {left} memories are left"


# --- 5. the worker seals an erased vector after the erasure's DELETE ------------------------------


def test_no_vector_sealed_during_an_erasure_keeps_an_erased_memory(
    client: TestClient,
    world: World,
    store: Store,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """review17's finding 9 was fixed by taking the owners to purge from the erasure's DELETE
    and by locking a chunk in `_drop_dead`. The embedding worker can still seal the erased
    vector *after* the DELETE: at READ COMMITTED its `_seal` reads the owner's tail (the
    erased memory's `vector_tail` and `memory_vectors` rows, deleted but not yet committed, are
    still visible), inserts a chunk holding that vector, then waits to delete those tail rows
    (the erasure holds them). The erasure's `_purge_vectors` lists the owner's chunks without
    the worker's (not committed), commits, and the worker then commits its chunk: the erased
    memory's int8 vector stays sealed until the idle sweep reaches it. The worker's save is of
    a memory about someone else (Bob) by the same agent: they share the owner `as<agent>`.
    Here `CHUNK_ROWS` is 2. Suggested: the seal takes the rows it packs `FOR KEY SHARE` (or
    locks the tail rows first, `FOR UPDATE`, and rereads), so it waits for the erasure and
    packs what is left; or the erasure takes the owners' advisory locks (`_lock_owner`) before
    its DELETE, sorted, so no seal of those owners runs beside it."""
    on_postgres_only(settings)
    import mnemos.storage.sql_vectors as sql_vectors

    monkeypatch.setattr(sql_vectors, "CHUNK_ROWS", 2)
    ann = world.user("Ann", "r19-seal")
    bob = world.user("Bob", "r19-seal")
    bot = world.agent(ann)

    def stored(content: str, subject: Actor) -> uuid.UUID:
        body = memory_body(content, subject_id=subject.id)
        answer = client.post(AGENT_MEMORIES, json=body, headers=bot.headers)
        assert answer.status_code == 201, answer.text
        return uuid.UUID(answer.json()["data"]["id"])

    about_ann, about_bob = stored("Ann note", ann), stored("Bob note", bob)
    vector = np.ones((1, 384), dtype=np.float32) / np.sqrt(384)
    assert store.save_vectors("test-model", [about_ann], vector) == 1  # type: ignore[attr-defined]
    url = store_url(store)
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            pk = conn.execute(sa.select(memories.c.pk).where(memories.c.id == about_ann)).scalar()
    finally:
        engine.dispose()

    original = store._purge_vectors  # type: ignore[attr-defined]
    finished: list[Callable[[], Any]] = []

    def seal_then_purge(*args: Any) -> Any:
        if not finished:  # the worker saves Bob's vector after the DELETE, before the purge
            save = lambda: store.save_vectors("test-model", [about_bob], vector)  # type: ignore[attr-defined]  # noqa: E731
            finished.append(meanwhile_or_waiting(save, url))
        return original(*args)

    monkeypatch.setattr(store, "_purge_vectors", seal_then_purge)
    answer = client.post("/api/v1/me/memories/erase", json={"confirm": True}, headers=ann.headers)
    assert answer.status_code == 200 and answer.json()["data"]["erased"] == 1, answer.text
    assert finished, "the hook did not run"
    assert finished[0]() == 1  # the worker's save ends once the erasure committed
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            chunks = conn.execute(sa.select(vector_chunks.c.pks)).scalars().all()
    finally:
        engine.dispose()
    sealed = [np.frombuffer(bytes(blob), dtype="<i8").tolist() for blob in chunks]
    assert not any(pk in keys for keys in sealed), f"erased memory {pk} sealed in {sealed}"
