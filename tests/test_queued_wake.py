"""`VectorStore.on_queued`: a commit of this process that queued memories tells the listeners
once it is visible, and only such a commit (review7: a failed transaction leaves no flag)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta

import numpy as np
import pytest
import sqlalchemy as sa
from numpy.typing import NDArray

from mnemos import indexer
from mnemos.domain.ids import utcnow
from mnemos.domain.models import Status
from mnemos.storage import sql
from mnemos.storage.base import Store
from mnemos.storage.schema import vector_queue
from tests.world import World, agent_memory


def test_only_a_committed_insert_wakes_and_its_queue_row_is_visible(
    store: Store, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = world.agent(world.user("Waker", "waking"))
    seen: list[int] = []

    def listener() -> None:  # runs after the commit: a new read sees the queued row
        with store._read() as conn:  # type: ignore[attr-defined]
            seen.append(conn.execute(sa.select(sa.func.count()).select_from(vector_queue)).one()[0])

    store.on_queued(listener)
    kept = agent_memory(agent, "kept")
    store.insert_memory(kept)
    assert seen == [1]

    def fail(*_: object) -> None:
        raise RuntimeError("the history write fails")

    monkeypatch.setattr(sql, "record", fail)  # after the insert noted the queue
    with pytest.raises(RuntimeError):
        store.insert_memory(agent_memory(agent, "lost"))
    monkeypatch.undo()
    assert seen == [1]
    # The next write transaction (maybe on the same pooled connection) queues nothing: no wake.
    store.set_memory_status(agent.tenant, kept.id, Status.ARCHIVED, utcnow())
    store.keep_search("s", [], utcnow(), "caller", 5)  # a lazy write
    assert seen == [1]
    store.insert_memory(agent_memory(agent, "again"))
    assert seen == [1, 2]


class Constant:
    """An embedder that costs nothing: the same unit vector for every text."""

    model = "constant"
    dimensions = 8

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        vectors = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        vectors[:, 0] = 1.0
        return vectors


def test_a_woken_worker_sweeps_at_most_once_a_look(
    store: Store, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stores wake the worker at once, but its sweep of deleted vectors stays a background
    chore: at most once per `IDLE_SECONDS`, however many stores wake it (review7 counted 34
    sweeps in 3 s at 20 stores a second)."""
    monkeypatch.setattr(indexer, "IDLE_SECONDS", 5.0)
    sweeps: list[float] = []
    compact = store.compact_vectors

    def counted(*args: object) -> object:
        sweeps.append(time.monotonic())
        return compact(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "compact_vectors", counted)
    agent = world.agent(world.user("Sweeper", "sweeping"))
    worker = indexer.Indexer(store, Constant())
    worker.start()
    try:
        for i in range(20):
            store.insert_memory(agent_memory(agent, f"note {i}"))
            time.sleep(0.1)
        deadline = time.monotonic() + 10
        while store.vector_backlog() > 0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        worker.stop()
    assert 1 <= len(sweeps) <= 2  # the first idle moment, and perhaps one 5 s on


def test_a_memory_just_stored_is_claimed_before_a_backlog(store: Store, world: World) -> None:
    """The worker claims the newest queued memories first: one tenant's backlog (an import, a
    burst) never holds another tenant's new memory away from search by meaning."""
    busy = world.agent(world.user("Busy", "org-busy"))
    other = world.agent(world.user("Other", "org-other"))
    start = utcnow()
    backlog = [agent_memory(busy, f"note {i}", start) for i in range(20)]
    store.replace_memories(busy.tenant, backlog, [], start)
    fresh = agent_memory(other, "an aisle seat on long flights")
    store.insert_memory(fresh)
    claimed = store.claim_unembedded(1, timedelta(seconds=30))
    assert [memory_id for memory_id, _ in claimed] == [fresh.id]
    rest = store.claim_unembedded(len(backlog), timedelta(seconds=30))  # then the backlog
    assert {memory_id for memory_id, _ in rest} == {m.id for m in backlog}
