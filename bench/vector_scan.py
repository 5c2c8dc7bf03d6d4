"""How long the part of a semantic search that grows with the scope takes, by owner size, on each
backend (no HTTP).

    python -m bench.vector_scan --rows 10000 --rows 100000 --database-url URL

Writes `rows` synthetic vectors under a fresh owner key, exactly as the embedding worker stores
them (`memory_vectors` and sealed `vector_chunks` with their sign bits), then times the two
steps of `nearest_memories` before its visibility check: reading the owner's keys and sign bits
and ranking them (`_sign_bits`, `first_pass`), and scoring the closest `RESCORE`
exactly from their int8 vectors (`_rescored`). The bench's org-wide row at 100,000 memories
covers an organization of ~6,600 vectors only; this measures 100,000 directly.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid

import numpy as np
import sqlalchemy as sa

from mnemos.config import Settings
from mnemos.storage import migrate, open_store
from mnemos.storage.postgres import driver_url
from mnemos.storage.schema import memory_vectors, vector_chunks
from mnemos.storage.sql import SqlStore
from mnemos.storage.sql_vectors import CHUNK_ROWS, RESCORE
from mnemos.storage.vector_codes import first_pass, quantize, sign_bits

MODEL = "scan"


def write_owner(
    store: SqlStore, url: str, rows: int, rng: np.random.Generator
) -> tuple[uuid.UUID, str, np.ndarray]:
    """A fresh owner with `rows` vectors (memory keys far above the real ones: `memory_vectors`
    rows without memories, written on a connection that does not check foreign keys)."""
    owner = "oo" + uuid.uuid4().hex  # an organization's, in a tenant of its own
    tenant = uuid.uuid4()
    vectors = rng.standard_normal((rows, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    quantized, scales = quantize(vectors)
    bits = sign_bits(quantized)
    with store._read() as conn:
        top = conn.execute(sa.select(sa.func.max(memory_vectors.c.memory_pk))).scalar() or 0
    base = int(top) + 1_000_000_000
    engine = sa.create_engine(driver_url(url))  # SQLite checks no foreign key by default
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("SET LOCAL session_replication_role = replica")
        for start in range(0, rows, 10_000):
            end = min(rows, start + 10_000)
            conn.execute(
                memory_vectors.insert(),
                [
                    {
                        "tenant_id": tenant,
                        "memory_pk": base + i,
                        "model": MODEL,
                        "scale": float(scales[i]),
                        "vector": quantized[i].tobytes(),
                    }
                    for i in range(start, end)
                ],
            )
        for seq, start in enumerate(range(0, rows, CHUNK_ROWS), start=1):
            end = min(rows, start + CHUNK_ROWS)
            conn.execute(
                vector_chunks.insert().values(
                    tenant_id=tenant,
                    owner=owner,
                    seq=seq,
                    model=MODEL,
                    rows=end - start,
                    pks=np.arange(base + start, base + end, dtype="<i8").tobytes(),
                    scales=scales[start:end].tobytes(),
                    vectors=quantized[start:end].tobytes(),
                    bits=bits[start:end].tobytes(),
                )
            )
    engine.dispose()
    return tenant, owner, vectors


def percentiles(times: list[float]) -> dict[str, float]:
    times = sorted(times)
    return {
        "p50_ms": round(times[len(times) // 2], 2),
        "p95_ms": round(times[int(0.95 * len(times))], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--rows", type=int, action="append")
    parser.add_argument("--repeat", type=int, default=40)
    args = parser.parse_args()
    settings = Settings(database_url=args.database_url)
    migrate(settings)
    store = open_store(settings)
    assert isinstance(store, SqlStore)
    rng = np.random.default_rng(3)
    found = {}
    for rows in args.rows or [10_000, 100_000]:
        tenant, owner, vectors = write_owner(store, args.database_url, rows, rng)
        probe = vectors[0]
        first, second = [], []
        for _ in range(args.repeat):
            began = time.perf_counter()
            with store._read() as conn:
                pks, bits = store._sign_bits(conn, [tenant], {owner}, MODEL)
                nearest = first_pass(pks, bits, probe, RESCORE, 1)
                middle = time.perf_counter()
                keys, _ = store._rescored(conn, [tenant], nearest, MODEL, probe)
            done = time.perf_counter()
            first.append((middle - began) * 1000)
            second.append((done - middle) * 1000)
            assert len(pks) == rows and len(keys) == min(rows, RESCORE)
        total = [a + b for a, b in zip(first, second, strict=True)]
        found[rows] = {
            "sign bits + first pass": percentiles(first),
            f"rescore {RESCORE}": percentiles(second),
            "total": percentiles(total),
        }
        print(rows, found[rows], flush=True)
    print(json.dumps({"backend": store._read_engine.dialect.name, "scoring": found}))
    store.close()


if __name__ == "__main__":
    main()
