"""Recall-by-meaning rows of the benchmark (docs/search.md): vectors for the bulk, queries through
the API.

Embedding 1,000,000 texts with the local model takes 40+ minutes on this machine, so the bulk's
vectors are synthetic: unit vectors drawn around 2,000 topic centres (each at cosine ~0.7 to its
centre, so neighbours sit at 0.4-0.6 as with real sentence embeddings), int8-quantised and laid
out exactly as the embedding worker lays them out (full chunks of 256 per owner with their sign
bits, the rest in the owner's tail), under the local model's name, so the server searches them.
Every search goes through the real API and embeds its query with the real local model; memories
stored during the run are embedded by the server's own worker, which runs while the store row is
measured. The search reads the same number of bytes whatever the vectors' values (sign bits of
the scope, then `RESCORE` int8 vectors), so latency does not depend on them; recall@10 against
exact float32 search is measured in-process with probes drawn from the same distribution
(bench/bit_recall.py measures it on real embeddings).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from bench.dataset import COMMON, Dataset, reuse
from mnemos.config import Settings
from mnemos.domain.accounts import hash_key
from mnemos.domain.memories import AgentListParams, MemoryService
from mnemos.domain.queries import Filters
from mnemos.embedding.local import MODEL
from mnemos.storage import migrate, open_store
from mnemos.storage.schema import (
    memories,
    memory_vectors,
    vector_chunks,
    vector_queue,
    vector_tail,
)
from mnemos.storage.sql import SqlStore
from mnemos.storage.sql_vectors import CHUNK_ROWS, OWNER_COLUMNS, owner_keys
from mnemos.storage.vector_codes import quantize, sign_bits

DIMENSIONS = 384
TOPICS = 2_000
NOISE = 0.052  # per dimension: cosine to the topic centre ~0.7
SEARCH = "/api/v1/agent/memories/search"
QUESTION = "which harbor did the shipment leave from last spring?"
RECALL_PROBES = 50
FRESHNESS_SAMPLES = 40


@contextmanager
def copied(
    backend: str, template: str, *, vectors: bool = True
) -> Iterator[tuple[Settings, SqlStore, Dataset]]:
    """A copy of `template` (a database `bench.run --keep-template` saved, before its vectors),
    migrated, opened and settled, with its dataset; the bench's synthetic vectors filled
    (`vectors`) as `fill` lays them out. Dropped afterwards. For the side benches that measure
    one part of a search on the data of `bench.run --suite vectors`."""
    from bench.run import database, settle  # bench.run imports this module

    tmp = Path(tempfile.mkdtemp(prefix="mnemos-vectors-"))
    url, drop = database(backend, tmp, template)
    try:
        settings = Settings(database_url=url)
        migrate(settings)
        store = open_store(settings)
        assert isinstance(store, SqlStore)
        try:
            data = reuse(store)
            if vectors:
                fill(store, data)
            settle(store)
            yield settings, store, data
        finally:
            store.close()
    finally:
        drop()
        shutil.rmtree(tmp, ignore_errors=True)


def percentiles(ms: list[float], skip: int = 0) -> dict[str, float]:
    """p50 and p95 of timings in milliseconds, after the first `skip` (warm-up)."""
    kept = ms[skip:]
    return {
        "p50": round(float(np.percentile(kept, 50)), 3),
        "p95": round(float(np.percentile(kept, 95)), 3),
    }


def _centres(seed: int) -> NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((TOPICS, DIMENSIONS)).astype(np.float32)
    return centres / np.linalg.norm(centres, axis=1, keepdims=True)


def _draw(
    rng: np.random.Generator, centres: NDArray[np.float32], count: int
) -> NDArray[np.float32]:
    topics = rng.integers(0, TOPICS, count)
    noise = rng.standard_normal((count, DIMENSIONS)).astype(np.float32) * NOISE
    vectors = centres[topics] + noise
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def fill(store: SqlStore, data: Dataset, seed: int = 7) -> dict[str, Any]:
    """Give every memory a vector (bulk path, layout as the worker's) and empty the queue;
    returns the float32 vectors of the big agent's and organization 0's memories, for recall."""
    started = time.monotonic()
    rng = np.random.default_rng(seed)
    centres = _centres(seed)
    owners_cols = [memories.c[column] for column, _ in OWNER_COLUMNS]
    with store._read() as conn:
        rows = conn.execute(
            sa.select(memories.c.pk, *owners_cols, memories.c.scope, memories.c.tenant_id).order_by(
                memories.c.pk
            )
        ).all()
    count = len(rows)
    floats = _draw(rng, centres, count)
    quantized, scales = quantize(floats)
    bits = sign_bits(quantized)
    kept: dict[str, Any] = {"agent": [], "org": []}
    by_owner: dict[tuple[Any, str], list[int]] = defaultdict(list)  # (tenant, owner key)
    for index, row in enumerate(rows):
        for owner in owner_keys(row[5], row[1:5]):
            by_owner[(row[6], owner)].append(index)
        if row[1] == data.big_agent_id:
            kept["agent"].append(index)
        if row[4] == data.org_id:
            kept["org"].append(index)
    pks = np.asarray([row[0] for row in rows], dtype=np.int64)
    with store._write_engine.begin() as conn:
        for start in range(0, count, 10_000):
            conn.execute(
                memory_vectors.insert(),
                [
                    {
                        "tenant_id": rows[i][6],
                        "memory_pk": int(pks[i]),
                        "model": MODEL,
                        "scale": float(scales[i]),
                        "vector": quantized[i].tobytes(),
                    }
                    for i in range(start, min(count, start + 10_000))
                ],
            )
            print(f"\r  vectors {min(count, start + 10_000):,}/{count:,}", end="", file=sys.stderr)
        print(file=sys.stderr)
        chunks = tails = 0
        for (tenant, owner), indexes in by_owner.items():
            full = len(indexes) // CHUNK_ROWS * CHUNK_ROWS
            batch = []
            for seq, start in enumerate(range(0, full, CHUNK_ROWS), start=1):
                part = np.asarray(indexes[start : start + CHUNK_ROWS])
                batch.append(
                    {
                        "tenant_id": tenant,
                        "owner": owner,
                        "seq": seq,
                        "model": MODEL,
                        "rows": len(part),
                        "pks": pks[part].astype("<i8").tobytes(),
                        "scales": scales[part].astype("<f4").tobytes(),
                        "vectors": quantized[part].tobytes(),
                        "bits": bits[part].tobytes(),
                    }
                )
                if len(batch) == 200:
                    conn.execute(vector_chunks.insert(), batch)
                    chunks += len(batch)
                    batch = []
            if batch:
                conn.execute(vector_chunks.insert(), batch)
                chunks += len(batch)
            rest = [
                {"tenant_id": tenant, "owner": owner, "memory_pk": int(pks[i])}
                for i in indexes[full:]
            ]
            if rest:
                conn.execute(vector_tail.insert(), rest)
                tails += len(rest)
        conn.execute(vector_queue.delete())
    return {
        "seconds": round(time.monotonic() - started, 1),
        "chunks": chunks,
        "tail_rows": tails,
        "owners": len(by_owner),
        "rng": rng,
        "centres": centres,
        "agent": (pks[kept["agent"]], floats[kept["agent"]]),
        "org": (pks[kept["org"]], floats[kept["org"]]),
    }


def vector_bytes(store: SqlStore) -> dict[str, int]:
    """On-disk size of the vector tables (PostgreSQL: with TOAST and indexes; SQLite: dbstat)."""
    names = ["memory_vectors", "vector_chunks", "vector_tail", "vector_queue"]
    sizes: dict[str, int] = {}
    with store._read() as conn:
        for name in names:
            if store._read_engine.dialect.name == "postgresql":
                size = conn.exec_driver_sql(f"SELECT pg_total_relation_size('{name}')").scalar()
            else:
                try:
                    size = conn.exec_driver_sql(
                        "SELECT sum(pgsize) FROM dbstat WHERE name = ? OR name LIKE ?",
                        (name, f"sqlite_autoindex_{name}%"),
                    ).scalar()
                except sa.exc.OperationalError:  # SQLite built without dbstat
                    size = None
            sizes[name] = int(size or 0)
    return sizes


def recall_at_10(store: SqlStore, data: Dataset, filled: dict[str, Any]) -> dict[str, float]:
    """Mean overlap of the top 10 from the store (int8 chunks, the server's code path) with the
    exact float32 top 10 over the same scope, for probes drawn like the data."""
    big = store.agent_by_key(hash_key(data.big_agent_key))
    assert big is not None
    found: dict[str, float] = {}
    for label, scope in (("one agent", "me"), ("org-wide", "org")):
        query = MemoryService.agent_query(big, AgentListParams(memory_scope=scope), Filters())
        pks, floats = filled["agent" if scope == "me" else "org"]
        if scope == "org":  # the org list is its organization memories, not its subject ones
            with store._read() as conn:
                shared = set(
                    conn.execute(
                        sa.select(memories.c.pk).where(
                            memories.c.organization_id == data.org_id,
                            memories.c.scope == "organization",
                        )
                    ).scalars()
                )
            mask = np.asarray([int(pk) in shared for pk in pks])
            pks, floats = pks[mask], floats[mask]
        probes = _draw(filled["rng"], filled["centres"], RECALL_PROBES)
        overlaps = []
        for probe in probes:
            exact = set(pks[np.argsort(-(floats @ probe))[:10]].tolist())
            got = store.nearest_memories(query, probe, MODEL, 10)
            with store._read() as conn:
                ids = [r.id for r in got]
                got_pks = set(
                    conn.execute(sa.select(memories.c.pk).where(memories.c.id.in_(ids))).scalars()
                )
            overlaps.append(len(exact & got_pks) / 10)
        found[label] = round(float(np.mean(overlaps)), 4)
    return found


def freshness(base: str, key: str) -> dict[str, float]:
    """Seconds from a store's answer until a semantic search (the memory's own text, its
    author's scope) returns it first: the embedding worker's delay, as a client sees it."""
    waits = []
    with httpx.Client(base_url=base, timeout=60, headers={"X-API-Key": key}) as http:
        for _ in range(FRESHNESS_SAMPLES):
            text = f"fresh {uuid.uuid4().hex} {COMMON} fleet tender"
            body = {
                "memory": {
                    "content": text,
                    "system": "long_term",
                    "type": "semantic",
                    "segment": "user",
                    "thought": "bench",
                }
            }
            stored = http.post("/api/v1/agent/memories", json=body)
            stored.raise_for_status()
            memory_id = stored.json()["data"]["id"]
            began = time.perf_counter()
            while True:
                answer = http.get(SEARCH, params={"query": text, "mode": "semantic", "limit": 1})
                answer.raise_for_status()
                hits = answer.json()["data"]
                if hits and hits[0]["id"] == memory_id:
                    break
                if time.perf_counter() - began > 30:
                    raise RuntimeError("a stored memory was not searchable by meaning in 30 s")
                time.sleep(0.01)
            waits.append(time.perf_counter() - began)
            time.sleep(0.2)
    ordered = sorted(waits)
    return {
        "p50": round(ordered[len(ordered) // 2], 3),
        "p99": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 3),
        "max": round(ordered[-1], 3),
    }
