"""Two processes sealing the same owner's tail (docs/search.md, "Vector storage"): each
embedding worker's batch ends by turning a full tail into a chunk. On PostgreSQL two workers
can bring the same tail to `CHUNK_ROWS` at the same moment; the owner's advisory lock makes the
second wait for the first and then find nothing left to seal (without it both read the same
rows and wrote chunk number 1 twice). SQLite has one writer at a time."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from mnemos.config import Settings
from mnemos.storage import open_store
from mnemos.storage.base import Store
from mnemos.storage.schema import vector_chunks, vector_tail
from mnemos.storage.sql_vectors import CHUNK_ROWS
from tests.test_vector_search import DIMS, MODEL, agent_memories, unit
from tests.world import World


def test_two_workers_filling_one_tail_seal_it_once(
    store: Store, world: World, settings: Settings
) -> None:
    if settings.resolved_database_url().startswith("sqlite"):
        pytest.skip("SQLite has one writer at a time: two transactions cannot seal together")
    agent = world.agent(world.user("Ann", "acme"))
    rng = np.random.default_rng(3)
    made = agent_memories(agent, CHUNK_ROWS + 1)
    store.replace_memories(agent.tenant, made, [], made[0].inserted_at)
    vectors = unit(rng.standard_normal((len(made), DIMS)).astype(np.float32))
    ids = [memory.id for memory in made]
    # One short of a full tail; each worker then adds one vector of its own.
    store.save_vectors(MODEL, ids[: CHUNK_ROWS - 1], vectors[: CHUNK_ROWS - 1])

    # Both transactions have written their tail row before either seals: each sees a full
    # tail (the rows before, and its own) and must not seal what the other seals.
    both_written = threading.Barrier(2, timeout=30)
    workers = [open_store(settings) for _ in range(2)]
    for worker in workers:
        seal = worker._seal  # type: ignore[attr-defined]

        def seal_together(*args: Any, _seal: Any = seal) -> None:
            both_written.wait()
            _seal(*args)

        worker._seal = seal_together  # type: ignore[attr-defined]
    try:
        with ThreadPoolExecutor(2) as pool:
            saving = [
                pool.submit(worker.save_vectors, MODEL, [ids[i]], vectors[i : i + 1])
                for worker, i in zip(workers, (CHUNK_ROWS - 1, CHUNK_ROWS), strict=True)
            ]
            assert [future.result() for future in saving] == [1, 1]
    finally:
        for worker in workers:
            worker.close()

    with store._read() as conn:  # type: ignore[attr-defined]
        chunks = conn.execute(sa.select(vector_chunks.c.seq, vector_chunks.c.pks)).all()
        tail = conn.execute(sa.select(vector_tail.c.memory_pk)).scalars().all()
    sealed = [pk for _, pks in chunks for pk in np.frombuffer(bytes(pks), dtype="<i8").tolist()]
    assert [seq for seq, _ in chunks] == [1]  # the agent scope's one owner key, sealed once
    assert len(sealed) == len(set(sealed)) == CHUNK_ROWS
    assert len(tail) == 1  # the vector the second seal did not take
    assert set(tail).isdisjoint(sealed)
