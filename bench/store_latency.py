"""Store latency through HTTP with the embedding worker busy, idle and off, versions side by side.

    python -m bench.store_latency --side before=/tmp/old --side after=. \\
        --template sqlite=FILE --template postgresql=DATABASE --requests 300 --rounds 2

Per backend, round, phase and side (a source tree served with its own code: `mnemos serve
--workers 1`, the local embedder), a fresh copy of the template. "busy": the template's
memories are all queued for embedding (a loaded template holds no vectors), so the worker
drains that backlog for the whole run, as after an import or a `mnemos reindex`. "idle": the
queue is emptied first, so the worker embeds only what the client stores, each memory right
after its store. "none": no worker at all (`MNEMOS_EMBEDDER=none`). One client stores `--requests` memories
one after the other (after 10 unmeasured); reported: store p50 / p95 / p99 ms per run and the
median of rounds, and the server process's CPU (user + system, every thread: the worker's too
when it runs) per measured store. With `--normal 1`, SQLite also runs the last side with
`MNEMOS_SQLITE_SYNCHRONOUS=NORMAL` (what the store costs without an fsync per commit). Sides
run one after the other, the order reversed every other round.
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
import numpy as np

from bench import sides as sides_
from bench.run import AGENT, STORE_BODY, bench_port, database

PREPARE = """
import json, sys
import sqlalchemy as sa
from bench.dataset import reuse
from mnemos.config import Settings
from mnemos.storage import migrate, open_store
settings = Settings(database_url=sys.argv[1])
migrate(settings)
store = open_store(settings)
data = reuse(store)
if sys.argv[2] != "busy":  # an empty queue
    engine = sa.create_engine(store._write_engine.url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM vector_queue")
    engine.dispose()
print(json.dumps({"key": data.big_agent_key, "backlog": store.vector_backlog()}))
store.close()
"""


WARMUP = 10
IDLE_SETTLE_SECONDS = 8.0  # the worker loads its model (a few seconds of CPU) before it idles


def figures(ms: list[float]) -> dict[str, float]:
    return {f"p{p}": round(float(np.percentile(ms, p)), 2) for p in (50, 95, 99)}


PHASES = {"busy": "local", "idle": "local", "none": "none"}  # the phase's MNEMOS_EMBEDDER


def phase(
    backend: str, template: str, tree: Path, kind: str, requests: int, port: int, **env: str
) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-store6-"))
    url, drop = database(backend, tmp, template)
    server = None
    try:
        facts = json.loads(sides_.in_side(tree, PREPARE, url, kind))
        server = sides_.serve(tree, url, port, **{"MNEMOS_EMBEDDER": PHASES[kind], **env})
        if kind == "busy":
            for _ in range(150):  # until the worker has loaded its model and is embedding
                if sides_.backlog(url, tree) < facts["backlog"]:
                    break
                time.sleep(0.2)
        else:
            time.sleep(IDLE_SETTLE_SECONDS)
        before, began = sides_.backlog(url, tree), time.perf_counter()
        spent: list[float] = []
        headers = {"X-API-Key": facts["key"]}
        base = f"http://127.0.0.1:{port}"
        cpu = 0.0
        with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
            for i in range(requests + WARMUP):
                if i == WARMUP:
                    cpu = sides_.cpu_seconds(server.pid)
                body = json.loads(STORE_BODY.replace("%d %d", f"0 {i} {uuid.uuid4().hex}"))
                started = time.perf_counter()
                http.post(AGENT, json=body).raise_for_status()
                if i >= WARMUP:
                    spent.append((time.perf_counter() - started) * 1000)
        cpu = sides_.cpu_seconds(server.pid) - cpu
        seconds = time.perf_counter() - began
        embedded = before - sides_.backlog(url, tree) + requests + WARMUP
        return {
            "store ms": figures(spent),
            "server cpu ms per store": round(cpu * 1000 / requests, 2),
            "backlog at start": facts["backlog"],
            "embedded per s meanwhile": round(embedded / seconds, 1),
            "load average": sides_.load_average(),
        }
    finally:
        sides_.clean_up(server, drop, tmp)


def run(
    backend: str, template: str, sides: dict[str, Path], args: argparse.Namespace
) -> dict[str, Any]:
    port = bench_port(19600 + os.getpid() % 300)
    configs: dict[str, tuple[Path, dict[str, str]]] = {
        name: (tree, dict(args.side_envs.get(name, {}))) for name, tree in sides.items()
    }
    if backend == "sqlite" and args.normal:
        last = list(sides)[-1]
        configs[f"{last} NORMAL"] = (sides[last], {"MNEMOS_SQLITE_SYNCHRONOUS": "NORMAL"})
    found: dict[str, list[dict[str, Any]]] = {}
    for round_ in range(args.rounds):
        order = list(configs) if round_ % 2 == 0 else list(configs)[::-1]
        for kind in PHASES:
            for name in order:
                tree, env = configs[name]
                key = f"{name}, worker {kind}"
                result = phase(backend, template, tree, kind, args.requests, port, **env)
                found.setdefault(key, []).append(result)
                print(backend, key, result, file=sys.stderr, flush=True)
    summary = {
        key: {
            f"store {p} ms (median of rounds)": sides_.median([r["store ms"][p] for r in runs])
            for p in ("p50", "p95", "p99")
        }
        | {
            "server cpu ms per store (median of rounds)": sides_.median(
                [r["server cpu ms per store"] for r in runs]
            )
        }
        for key, runs in found.items()
    }
    return {"summary": summary, "runs": found}


if __name__ == "__main__":
    sides_.main(__doc__, run, requests=300, rounds=2, normal=1)
