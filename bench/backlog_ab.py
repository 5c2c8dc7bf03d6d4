"""Stores and lists while the embedding worker works through a backlog, two versions in turn.

    python -m bench.backlog_ab --side before=/tmp/old --side after=. \\
        --template sqlite=FILE --template postgresql=DATABASE --requests 200 --rounds 2

A loaded template (`bench.run --keep-template`) holds its memories queued for embedding (the
load does not embed them): a server started on a copy of it with the local embedder spends the
whole run embedding that backlog, as a server does after an import or a `mnemos reindex`. Per
backend and round, each side (a source tree, served with its own code: `mnemos serve --workers
1`) gets a fresh copy; once its worker is embedding, one client alternates a store and a list
of the big agent's newest 20 memories, `--requests` of each. Sides run one after the other
(running both at once would put one side's worker on the other's requests), alternating which
goes first per round. Reported per side: store and list p50 / p95 ms (each round, and the
median of rounds), and how many memories its worker embedded per second meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench import sides as sides_
from bench import vectors
from bench.run import AGENT, STORE_BODY, bench_port, database

PREPARE = """
import json, sys
from bench.dataset import reuse
from mnemos.config import Settings
from mnemos.storage import migrate, open_store
settings = Settings(database_url=sys.argv[1])
migrate(settings)
store = open_store(settings)
data = reuse(store)
print(json.dumps({"key": data.big_agent_key, "backlog": store.vector_backlog()}))
store.close()
"""


def phase(backend: str, template: str, tree: Path, requests: int, port: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-backlog-"))
    url, drop = database(backend, tmp, template)
    server = None
    try:
        facts = json.loads(sides_.in_side(tree, PREPARE, url))
        server = sides_.serve(tree, url, port, MNEMOS_EMBEDDER="local")
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):  # until the worker has loaded its model and is embedding
            if sides_.backlog(url, tree) < facts["backlog"]:
                break
            time.sleep(0.2)
        before, began = sides_.backlog(url, tree), time.perf_counter()
        spent: dict[str, list[float]] = {"store": [], "list": []}
        headers = {"X-API-Key": facts["key"]}
        with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
            for i in range(requests + 5):
                body = json.loads(STORE_BODY.replace("%d %d", f"0 {i} {uuid.uuid4().hex}"))
                started = time.perf_counter()
                http.post(AGENT, json=body).raise_for_status()
                stored = time.perf_counter()
                http.get(AGENT, params={"limit": "20"}).raise_for_status()
                listed = time.perf_counter()
                if i >= 5:
                    spent["store"].append((stored - started) * 1000)
                    spent["list"].append((listed - stored) * 1000)
        seconds = time.perf_counter() - began
        after = sides_.backlog(url, tree)
        return {
            "store ms": vectors.percentiles(spent["store"]),
            "list ms": vectors.percentiles(spent["list"]),
            "backlog at start": facts["backlog"],
            "embedded per s meanwhile": round((before - after + requests + 5) / seconds, 1),
            "load average": sides_.load_average(),
        }
    finally:
        sides_.clean_up(server, drop, tmp)


def run(
    backend: str, template: str, sides: dict[str, Path], args: argparse.Namespace
) -> dict[str, Any]:
    requests, rounds = args.requests, args.rounds
    port = bench_port(19600 + os.getpid() % 300)
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    for round_ in range(rounds):
        order = list(sides) if round_ % 2 == 0 else list(sides)[::-1]
        for name in order:
            found[name].append(phase(backend, template, sides[name], requests, port))
            print(backend, name, found[name][-1], file=sys.stderr, flush=True)
    summary = {
        name: {
            f"{what} {p} ms (median of rounds)": sides_.median([r[f"{what} ms"][p] for r in runs])
            for what in ("store", "list")
            for p in ("p50", "p95")
        }
        | {"embedded per s": sides_.median([r["embedded per s meanwhile"] for r in runs])}
        for name, runs in found.items()
    }
    return {"summary": summary, "rounds": found}


if __name__ == "__main__":
    sides_.main(__doc__, run, requests=200, rounds=2)
