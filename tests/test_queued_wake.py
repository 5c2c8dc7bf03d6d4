"""`VectorStore.on_queued`: a commit of this process that queued memories tells the listeners
once it is visible, and only such a commit (review7: a failed transaction leaves no flag)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

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
