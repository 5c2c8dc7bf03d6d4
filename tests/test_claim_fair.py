"""The embedding worker shares its time between tenants: a tenant that stores faster than the
worker embeds never keeps another tenant's memory from being embedded (docs/decisions.md, "The
embedding worker shares its time between tenants")."""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import timedelta

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from mnemos import indexer
from mnemos.domain.ids import utcnow
from mnemos.storage.base import Store
from mnemos.storage.queue_claims import fair_batch
from mnemos.storage.schema import memories, memory_vectors
from tests.world import Actor, World, agent_memory

LEASE = timedelta(seconds=30)
BATCH = 8


def _store_many(store: Store, agent: Actor, count: int, label: str) -> None:
    at = utcnow()
    memories = [agent_memory(agent, f"{label} {i}", at) for i in range(count)]
    store.replace_memories(agent.tenant, memories, [], at)


def _claimed(store: Store) -> set[uuid.UUID]:
    return {memory_id for memory_id, _ in store.claim_unembedded(BATCH, LEASE)}


def test_a_tenant_streaming_newer_memories_does_not_hold_back_another_s(
    store: Store, world: World
) -> None:
    """Tenant A has a backlog and stores a batch of newer memories before each claim (faster
    than the worker embeds); tenant B's one memory, older than A's stream, is claimed by the
    next claim all the same. Newest first alone left it waiting until A stopped."""
    busy = world.agent(world.user("Busy", "org-busy"))
    other = world.agent(world.user("Other", "org-other"))
    _store_many(store, busy, 40, "backlog")
    waiting = agent_memory(other, "a window seat on short flights")
    store.insert_memory(waiting)
    _store_many(store, busy, BATCH, "stream")
    claimed = _claimed(store)
    assert waiting.id in claimed
    assert len(claimed) == BATCH  # the rest of the batch is A's, newest first


def test_tenants_with_queued_memories_are_claimed_in_turn(store: Store, world: World) -> None:
    """Thirty tenants with one queued memory each and one tenant streaming newer memories
    before every claim: each of the thirty is claimed within a round of claims (seven places a
    claim go round the tenants; the eighth is the newest memory's)."""
    waiting = {}
    for i in range(30):
        agent = world.agent(world.user(f"Quiet{i}", f"org-quiet-{i}"))
        memory = agent_memory(agent, f"quiet note {i}")
        store.insert_memory(memory)
        waiting[memory.id] = i
    busy = world.agent(world.user("Busy", "org-busy"))
    _store_many(store, busy, 40, "backlog")
    rounds = math.ceil(31 / (BATCH - 1)) + 1  # +1: the first claim may start mid-round
    seen: set[uuid.UUID] = set()
    for i in range(rounds):
        _store_many(store, busy, BATCH, f"stream {i}")
        seen |= _claimed(store)
    assert set(waiting) <= seen, sorted(waiting[m] for m in set(waiting) - seen)


def test_each_tenant_s_newest_is_claimed_first(store: Store, world: World) -> None:
    """Within a tenant, the claim takes the newest queued memories first (a memory just stored
    is not queued behind its own tenant's backlog)."""
    busy = world.agent(world.user("Busy", "org-busy"))
    other = world.agent(world.user("Other", "org-other"))
    _store_many(store, busy, 20, "old")
    mine = [agent_memory(other, f"mine {i}") for i in range(3)]
    for memory in mine:
        store.insert_memory(memory)
    _store_many(store, busy, 20, "new")
    claimed = store.claim_unembedded(4, LEASE)
    ids = {memory_id for memory_id, _ in claimed}
    assert mine[-1].id in ids  # the other tenant's newest, not its oldest
    assert mine[0].id not in ids


def test_a_batch_holds_the_newest_then_each_tenant_in_turn() -> None:
    a, b, c = (uuid.UUID(int=n) for n in (1, 2, 3))
    newest = [(a, 90), (a, 89), (a, 88), (a, 87)]
    shares = [(b, 5), (a, 90), (c, 7), (a, 89), (b, 6)]
    # The newest first; then a round: each tenant's newest, then each one's second; then newest.
    assert fair_batch(newest, [b, a, c], shares, 5) == [(a, 90), (b, 6), (c, 7), (b, 5), (a, 89)]
    assert fair_batch(newest, [], [], 3) == newest[:3]
    assert fair_batch(newest, [b], [], 8) == newest  # b's memories are all claimed already


class Slow:
    """An embedder slower than the stream of stores below (~50 texts a second)."""

    model = "slow"
    dimensions = 8

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        time.sleep(0.02 * len(texts))
        vectors = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        vectors[:, 0] = 1.0
        return vectors


def _has_vector(store: Store, memory_id: uuid.UUID) -> bool:
    M, V = memories.c, memory_vectors.c
    with store._read() as conn:  # type: ignore[attr-defined]
        found = conn.execute(
            sa.select(sa.func.count())
            .select_from(memory_vectors)
            .join(memories, sa.and_(M.tenant_id == V.tenant_id, M.pk == V.memory_pk))
            .where(M.id == memory_id)
        )
        return bool(found.scalar_one())


def test_the_worker_embeds_another_tenant_s_memory_while_one_streams(
    store: Store, world: World
) -> None:
    """Through the real worker: tenant A stores faster than the worker embeds, without pause;
    tenant B's memory is embedded while A's stream goes on (it waited for A to stop)."""
    busy = world.agent(world.user("Busy", "org-busy"))
    other = world.agent(world.user("Other", "org-other"))
    _store_many(store, busy, 100, "backlog")
    stop = threading.Event()

    def stream() -> None:  # ~200 memories a second, four times the worker's pace
        i = 0
        while not stop.is_set():
            _store_many(store, busy, 10, f"stream {i}")
            i += 1
            time.sleep(0.05)

    worker = indexer.Indexer(store, Slow())
    streamer = threading.Thread(target=stream)
    worker.start()
    streamer.start()
    try:
        time.sleep(0.3)  # the stream and the worker under way
        waiting = agent_memory(other, "a window seat on short flights")
        store.insert_memory(waiting)
        deadline = time.monotonic() + 15  # a bound on the test, not a measurement
        while not _has_vector(store, waiting.id) and time.monotonic() < deadline:
            time.sleep(0.02)
        embedded = _has_vector(store, waiting.id)
        streaming = streamer.is_alive() and store.vector_backlog() > 0
    finally:
        stop.set()
        streamer.join()
        worker.stop()
    assert embedded
    assert streaming  # A's stream had not stopped, nor the worker caught up
