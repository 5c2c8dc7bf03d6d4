"""Where one semantic search's time goes, step by step, in one process (no server, no other
clients): the query's embedding, the owners' keys, reading the chunks' sign bits, the Hamming
pass, the rescoring reads, the visibility checks (`_checked`), and the rest (routing, the
memories' JSON).

    python -m bench.search_profile --template sqlite=FILE --template postgresql=DATABASE

Each backend gets a copy of a database `bench.run --keep-template` saved (before its vectors),
filled with the bench's synthetic vectors (`bench.vectors.fill`), then each search row of
`bench.run --suite vectors` is asked `--requests` times through the app in process
(`fastapi.testclient`); every step is timed by wrapping the store's and embedder's methods.
Medians and p95 per step, in milliseconds.

In process, the test client's own hand-offs are in "rest" (its `/healthz` alone took 7.6 ms
here) and a step may include waiting for the interpreter lock (`agent_by_key` alone: 0.28 ms
against 3.1 in a request): for the request path's real cost, measure a server over HTTP
(bench/results/2026-12-02/vectors-5, `request-path-*.txt`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from bench import vectors
from bench.dataset import COMMON
from mnemos.api.app import create_app
from mnemos.embedding import load_embedder
from mnemos.storage import sql_vectors as sv
from mnemos.storage.sql import SqlStore

SEARCHES: dict[str, dict[str, str]] = {
    "semantic, one agent": {"mode": "semantic"},
    "semantic, org-wide": {"mode": "semantic", "memory_scope": "org"},
    "semantic, org-wide, filter matching nothing": {
        "mode": "semantic",
        "memory_scope": "org",
        "segment": "tool",
    },
    f"hybrid '{COMMON}', one agent": {},
    f"hybrid '{COMMON}', org-wide": {"memory_scope": "org"},
}


class Timer:
    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)

    def wrap(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.spent[name] += time.perf_counter() - began

        return timed


def instrument(store: SqlStore, embedder: Any, timer: Timer) -> None:
    """Time the steps of `nearest_memories` (and the embedder) on these instances."""
    embedder.embed = timer.wrap("embed query", embedder.embed)
    store.nearest_memories = timer.wrap("nearest_memories (all)", store.nearest_memories)  # type: ignore[method-assign]
    store._owners = timer.wrap("owner keys", store._owners)  # type: ignore[method-assign]
    store.rank_memories = timer.wrap("keyword leg", store.rank_memories)  # type: ignore[method-assign]
    store.list_memories = timer.wrap("read the page (list_memories)", store.list_memories)  # type: ignore[method-assign]
    store.keep_search = timer.wrap("keep the answer (search_pages)", store.keep_search)  # type: ignore[method-assign]
    store.agent_by_key = timer.wrap("authenticate", store.agent_by_key)  # type: ignore[method-assign]
    blob_rows = store._blob_rows

    def named(conn: Any, name: str, params: dict[str, Any]) -> Any:
        return timer.wrap(f"read {name}", blob_rows)(conn, name, params)

    store._blob_rows = named  # type: ignore[method-assign]
    store._recheck = timer.wrap("visibility check of the candidates", store._recheck)  # type: ignore[method-assign]
    sv.int8_scores = timer.wrap("int8 scores", sv.int8_scores)
    sv.first_pass = timer.wrap("first pass (hamming, sign scores)", sv.first_pass)


OUTSIDE_NEAREST = (
    "embed query",
    "keyword leg",
    "read the page (list_memories)",
    "keep the answer (search_pages)",
    "authenticate",
)
"""The timed steps outside `nearest_memories`: the rest of a request is routing and JSON."""


def profile(backend: str, template: str, requests: int) -> dict[str, Any]:
    with vectors.copied(backend, template) as (settings, store, data):
        embedder = load_embedder("local")
        assert embedder is not None
        timer = Timer()
        instrument(store, embedder, timer)
        app = create_app(settings, store, embedder)
        results: dict[str, Any] = {}
        with TestClient(app) as client:
            headers = {"X-API-Key": data.big_agent_key}
            for label, params in SEARCHES.items():
                query = vectors.QUESTION if params.get("mode") == "semantic" else COMMON
                steps: dict[str, list[float]] = defaultdict(list)
                for attempt in range(requests + 3):
                    timer.spent.clear()
                    began = time.perf_counter()
                    answer = client.get(
                        vectors.SEARCH, params={"query": query, **params}, headers=headers
                    )
                    total = time.perf_counter() - began
                    answer.raise_for_status()
                    if attempt < 3:
                        continue  # warm caches and statements
                    steps["request (total)"].append(total * 1000)
                    for name, seconds in timer.spent.items():
                        steps[name].append(seconds * 1000)
                    inside = timer.spent.get("nearest_memories (all)", 0) + sum(
                        timer.spent.get(name, 0) for name in OUTSIDE_NEAREST
                    )
                    steps["rest (routing, JSON)"].append((total - inside) * 1000)
                results[label] = {name: vectors.percentiles(ms) for name, ms in steps.items()}
                print(f"{backend} {label}: {results[label]}", file=sys.stderr)
        return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--template", action="append", required=True, metavar="BACKEND=SOURCE")
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    found = {}
    for item in args.template:
        backend, source = item.split("=", 1)
        found[backend] = profile(backend, source, args.requests)
    text = json.dumps(found, indent=2)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
