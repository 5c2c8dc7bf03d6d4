"""The fixes of review23's findings, beyond the findings' own tests (tests/test_review23.py):
a running server adopts what an old process saves after it started, sealed chunks included,
and only vectors of the endpoint's size; a merge leaves idempotency keys out; `mnemos backup`
syncs the directory of its rename."""

from __future__ import annotations

import io
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.domain.recall import adopt_former_vectors
from mnemos.embedding import load_embedder
from mnemos.indexer import Indexer
from mnemos.storage import backup
from mnemos.storage.base import Store
from mnemos.storage.schema import memory_vectors, vector_chunks
from mnemos.storage.sql_vectors import CHUNK_ROWS
from mnemos.storage.transfer_import import import_database
from tests.test_embedding import EmbeddingsServer, good_answer
from tests.test_transfer import AGENT, dump, fresh
from tests.world import World, agent_memory, memory_body


@pytest.fixture
def server() -> Iterator[EmbeddingsServer]:
    running = EmbeddingsServer()
    running.answer = good_answer
    yield running
    running.close()


def models(store: Store, table: sa.Table) -> list[str]:
    with store._read() as conn:  # type: ignore[attr-defined]
        return sorted(conn.execute(sa.select(table.c.model)).scalars())


def unit_vectors(rows: int, size: int) -> np.ndarray:
    rng = np.random.default_rng(rows)
    vectors = rng.standard_normal((rows, size)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_a_running_worker_adopts_what_an_old_process_saves_after_it_started(
    store: Store, world: World, server: EmbeddingsServer
) -> None:
    """A rolling upgrade whose last old process stops after the new ones started: what it
    saves under the bare name is adopted by a new process's worker, with no restart."""
    embedder = load_embedder(server.url, model="m", dimensions=8)
    assert embedder is not None
    indexer = Indexer(store, embedder, adopt_seconds=0.05)
    indexer.start()
    try:
        writer = world.agent(world.user("Ann", "acme"), "Writer")
        memory = agent_memory(writer, "aisle seats on the morning flight")
        store.insert_memory(memory)
        store.save_vectors("m", [memory.id], unit_vectors(1, 8))  # the old process's worker
        deadline = time.monotonic() + 10
        while models(store, memory_vectors) != ["m@8"] and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        indexer.stop()
    assert models(store, memory_vectors) == ["m@8"]


def test_chunks_an_old_process_sealed_are_adopted_and_other_sizes_are_not(
    store: Store, world: World, server: EmbeddingsServer
) -> None:
    """The old process seals full tails into chunks under the bare name: they are adopted with
    their vectors. Vectors of another size under that name are another model's (the name is an
    alias that came to name it): they stay as they are, for `mnemos reindex`."""
    embedder = load_embedder(server.url, model="m", dimensions=8)
    assert embedder is not None
    ann = world.user("Ann", "acme")
    writer = world.agent(ann, "Writer")
    made = [agent_memory(writer, f"note {i}") for i in range(CHUNK_ROWS)]
    for memory in made:
        store.insert_memory(memory)
    store.save_vectors("m", [memory.id for memory in made], unit_vectors(len(made), 8))
    other = agent_memory(world.agent(ann, "Other"), "another size")
    store.insert_memory(other)
    store.save_vectors("m", [other.id], unit_vectors(1, 4))
    assert set(models(store, vector_chunks)) == {"m"}

    assert adopt_former_vectors(store, embedder) == CHUNK_ROWS
    assert set(models(store, vector_chunks)) == {"m@8"}
    assert models(store, memory_vectors) == ["m", *["m@8"] * CHUNK_ROWS]
    assert adopt_former_vectors(store, embedder) == 0


def test_a_merge_leaves_idempotency_keys_out(
    client: TestClient, world: World, database_url: str, tmp_path: Path
) -> None:
    """A merge is not a move: the keys are the replay records of the server the file came
    from, and one may name a memory the merge skipped. Counted as skipped, as Tuya's tokens."""
    ann = world.agent(world.user("Ann", "Acme"))
    headers = {**ann.headers, "Idempotency-Key": "order-42"}
    assert client.post(AGENT, json=memory_body("window seat"), headers=headers).status_code == 201
    backend = "postgresql" if database_url.startswith("postgres") else "sqlite"
    with fresh(backend, tmp_path / "merged") as merged_url:
        merged = import_database(merged_url, [*io.BytesIO(dump(database_url))], merge=True)
        with fresh(backend, tmp_path / "moved") as plain_url:
            moved = import_database(plain_url, [*io.BytesIO(dump(database_url))])
    assert merged.as_json()["tables"]["idempotency_keys"] == {"rows": 0, "skipped": 1}
    assert moved.as_json()["tables"]["idempotency_keys"] == {"rows": 1, "skipped": 0}


def test_a_backup_syncs_its_directory_after_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rename that puts the verified copy in place is durable once `mnemos backup` says
    "ok": its directory is synced after it (a power loss cannot be shown; the calls can). The
    real `os.fsync` runs; each call's file, and whether the copy was in place, are noted."""
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("names a descriptor's file through /proc")
    source, out = tmp_path / "source.db", tmp_path / "copies" / "backup.db"
    out.parent.mkdir()
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE t (x)")
    synced: list[tuple[str, bool]] = []
    real = os.fsync

    def noting(descriptor: int) -> None:
        synced.append((os.readlink(f"/proc/self/fd/{descriptor}"), out.exists()))
        real(descriptor)

    monkeypatch.setattr(os, "fsync", noting)
    assert backup.backup_sqlite(source, out)["ok"] is True
    assert (str(out.parent), True) in synced
