"""What a hybrid search's keyword leg costs, with and without its pool (`recall.HYBRID_POOL`):
the full-text ranker (`Store.rank_memories`) asked for the best `HYBRID_DEPTH` of each search
row of `bench.run --suite vectors` that has words, in one process, on a copy of a database
`bench.run --keep-template` saved.

    python -m bench.keyword_leg --template sqlite=FILE --template postgresql=DATABASE --out F

Each row's query is the one a keyword search of the same words and scope builds (captured from
a request through the app), then timed `--requests` times with every pool size in turn (None:
every match scored). `overlap` is how many of the exact best 100 the pooled answer keeps.
Medians and p95 in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from bench import vectors
from bench.dataset import COMMON, MID, RARE
from mnemos.api.app import create_app
from mnemos.domain.queries import MemoryQuery
from mnemos.domain.recall import HYBRID_DEPTH, HYBRID_POOL

ROWS = {
    f"'{COMMON}' (10%), one agent": {"query": COMMON},
    f"'{COMMON}' (10%), org-wide": {"query": COMMON, "memory_scope": "org"},
    f"'{MID}' (1%), one agent": {"query": MID},
    f"'{MID}' (1%), org-wide": {"query": MID, "memory_scope": "org"},
    f"'{RARE}' (0.01%), one agent": {"query": RARE},
    f"'{RARE}' (0.01%), org-wide": {"query": RARE, "memory_scope": "org"},
    f"'{MID} {COMMON}' (two words), one agent": {"query": f"{MID} {COMMON}"},
    f"'{MID} {COMMON}' (two words), org-wide": {"query": f"{MID} {COMMON}", "memory_scope": "org"},
}


def captured(client: TestClient, store: Any, key: str, params: dict[str, str]) -> MemoryQuery:
    """The ranked query a keyword search with `params` hands the store."""
    seen: list[MemoryQuery] = []
    ranker = store.rank_memories

    def spy(query: MemoryQuery, **kwargs: Any) -> Any:
        seen.append(query)
        return ranker(query, **kwargs)

    store.rank_memories = spy
    try:
        answer = client.get(
            vectors.SEARCH, params={**params, "mode": "keyword"}, headers={"X-API-Key": key}
        )
        answer.raise_for_status()
    finally:
        del store.rank_memories
    return seen[0]


def measure(backend: str, template: str, requests: int, pools: list[int | None]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with vectors.copied(backend, template, vectors=False) as (settings, store, data):
        with TestClient(create_app(settings, store, None)) as client:
            for label, params in ROWS.items():
                query = captured(client, store, data.big_agent_key, params)
                exact = {s.id for s in store.rank_memories(query, limit=HYBRID_DEPTH)}
                row: dict[str, Any] = {}
                for pool in pools:
                    ms = []
                    for _ in range(requests + 2):
                        began = time.perf_counter()
                        found = store.rank_memories(query, limit=HYBRID_DEPTH, pool=pool)
                        ms.append((time.perf_counter() - began) * 1000)
                    row[f"pool {pool}"] = {
                        **vectors.percentiles(ms, skip=2),
                        "overlap": len(exact & {s.id for s in found}),
                    }
                results[label] = row
                print(f"{backend} {label}: {row}", file=sys.stderr)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--template", action="append", required=True, metavar="BACKEND=SOURCE")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    pools: list[int | None] = [None, HYBRID_POOL, 2 * HYBRID_POOL]
    found = {}
    for item in args.template:
        backend, source = item.split("=", 1)
        found[backend] = measure(backend, source, args.requests, pools)
    text = json.dumps(found, indent=2)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
