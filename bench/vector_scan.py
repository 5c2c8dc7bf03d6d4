"""How long scoring one owner's vectors takes, by owner size, on each backend (no HTTP).

    python -m bench.vector_scan --rows 10000 --rows 100000 --database-url URL

Writes `rows` synthetic int8 vectors into `vector_chunks` under a fresh owner key, exactly as
sealed chunks are stored, then times `_scores` (read the owner's chunks, numpy scoring): the
part of a semantic search that grows with the scope. The bench's org-wide row at 100,000
memories covers an organization of ~6,600 vectors only; this measures 100,000 directly.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid

import numpy as np

from mnemos.config import Settings
from mnemos.storage import migrate, open_store
from mnemos.storage.schema import vector_chunks
from mnemos.storage.sql import SqlStore
from mnemos.storage.sql_vectors import CHUNK_ROWS, quantize


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
        owner = "o" + uuid.uuid4().hex
        vectors = rng.standard_normal((rows, 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        quantized, scales = quantize(vectors)
        with store._write_engine.begin() as conn:
            for seq, start in enumerate(range(0, rows, CHUNK_ROWS), start=1):
                end = min(rows, start + CHUNK_ROWS)
                conn.execute(
                    vector_chunks.insert().values(
                        owner=owner,
                        seq=seq,
                        model="scan",
                        rows=end - start,
                        pks=np.arange(start, end, dtype="<i8").tobytes(),
                        scales=scales[start:end].tobytes(),
                        vectors=quantized[start:end].tobytes(),
                    )
                )
        probe = vectors[0]
        times = []
        for _ in range(args.repeat):
            began = time.perf_counter()
            with store._read() as conn:
                keys, scores = store._scores(conn, {owner}, "scan", probe)
            times.append((time.perf_counter() - began) * 1000)
            assert len(keys) == rows
        times.sort()
        found[rows] = {
            "p50_ms": round(times[len(times) // 2], 2),
            "p95_ms": round(times[int(0.95 * len(times))], 2),
        }
        print(rows, found[rows], flush=True)
    print(json.dumps({"backend": store._read_engine.dialect.name, "scoring": found}))
    store.close()


if __name__ == "__main__":
    main()
