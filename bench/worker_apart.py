"""The embedding worker as a thread of the server against a separate niced process (issue 13).

    python -m bench.worker_apart --side main=. --template postgresql=DATABASE \\
        --requests 400 --rounds 2 [--wake 30 --beside 50] [--poll-ms 1000]

Store latency (as `bench.store_latency`), per round and phase, on a fresh copy of the template
whose memories are all queued for embedding (a loaded template holds no vectors):

- "thread": `mnemos serve --workers 1` with the local embedder, its embedding worker (a thread
  of the server, nice 10) draining the backlog for the whole run (store_latency's "busy");
- "apart": the same server without its worker thread (started through `SERVE_WITHOUT_WORKER`,
  bench-only: `Indexer.start` does nothing; it still embeds its searches' queries), and beside
  it a second process (`DRAINER`, `nice -n 19`, or `--nice`) that runs the same `mnemos.indexer.Indexer` on
  the same database (the memories stay queued by the store's trigger);
- "none": the same server without a worker and nothing draining (store_latency's "none",
  but with the local embedder loaded for searches).

One client stores `--requests` memories one after the other (after 10 unmeasured); reported:
store p50 / p95 / p99 ms, the server process's CPU ms per store (user + system, every thread),
the drainer's CPU ms per store when there is one, and what was embedded per second meanwhile.
Phases run in turn, the order reversed every other round (`--requests 0`: none).

With `--wake N` (after the store phases): per round, "thread" and "apart" on a copy with its
queue emptied; `--beside RATE` stores a second from another client process (as
`bench.worker_wake`), and one client stores N memories one after the other, each followed by
semantic searches for its own words every 5 ms until found: stored-to-searchable p50/p95/p99 s.
The drainer looks at an empty queue every `--poll-ms` (its `IDLE_SECONDS`; the server's worker
is woken by its process's stores, a separate process is not).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
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
from bench.store_latency import IDLE_SETTLE_SECONDS, PREPARE, WARMUP, figures
from bench.worker_wake import BESIDE

GIVE_UP_SECONDS = 30

SERVE_WITHOUT_WORKER = """
import sys
from mnemos import indexer
indexer.Indexer.start = lambda self: None
indexer.Indexer.stop = lambda self: None
from mnemos.cli import main
sys.argv[0] = "mnemos"
main()
"""

DRAINER = """
import signal, sys
from mnemos import indexer
from mnemos.config import Settings
from mnemos.embedding import embedder_from_settings, worker_embedder
from mnemos.storage import open_store
indexer.IDLE_SECONDS = float(sys.argv[2])
indexer.NICENESS = int(sys.argv[3])  # as root the thread would otherwise renice itself to 10
settings = Settings(database_url=sys.argv[1], embedder="local")
store = open_store(settings)
embedder = embedder_from_settings(settings)
assert embedder is not None
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM, signal.SIGINT])
worker = indexer.Indexer(store, worker_embedder(embedder))
worker.start()
signal.sigwait([signal.SIGTERM, signal.SIGINT])
worker.stop()
store.close()
"""


def serve(tree: Path, url: str, port: int, worker: bool) -> subprocess.Popen[bytes]:
    """`mnemos serve --workers 1` with the local embedder, with or without its worker thread."""
    if worker:
        return sides_.serve(tree, url, port, MNEMOS_EMBEDDER="local")
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE_WITHOUT_WORKER, "serve", "--port", str(port)]
        + ["--workers", "1", "--log-level", "warning"],
        env={**sides_.side_env(tree), "MNEMOS_DATABASE_URL": url}
        | {"MNEMOS_RATE_LIMIT_PER_MINUTE": "0", "MNEMOS_EMBEDDER": "local"},
        cwd=tree,
    )
    for _ in range(300):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.kill()
    raise RuntimeError("the server without a worker did not start")


def drainer(tree: Path, url: str, poll: float, niceness: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["nice", "-n", str(niceness), sys.executable, "-c", DRAINER, url, str(poll), str(niceness)],
        env=sides_.side_env(tree),
        cwd=tree,
    )


def stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def store_phase(
    template: str, tree: Path, kind: str, args: argparse.Namespace, port: int
) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-apart-"))
    url, drop = database("postgresql", tmp, template)
    server = apart = None
    try:
        facts = json.loads(sides_.in_side(tree, PREPARE, url, "busy"))
        server = serve(tree, url, port, worker=kind == "thread")
        if kind == "apart":
            apart = drainer(tree, url, args.poll_ms / 1000, args.nice)
        if kind != "none":
            for _ in range(150):  # until the worker has loaded its model and is embedding
                if sides_.backlog(url, tree) < facts["backlog"]:
                    break
                time.sleep(0.2)
        else:
            time.sleep(IDLE_SETTLE_SECONDS)
        before, began = sides_.backlog(url, tree), time.perf_counter()
        spent: list[float] = []
        cpu = apart_cpu = 0.0
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": facts["key"]}, timeout=60
        ) as http:
            for i in range(args.requests + WARMUP):
                if i == WARMUP:
                    cpu = sides_.cpu_seconds(server.pid)
                    apart_cpu = sides_.cpu_seconds(apart.pid) if apart else 0.0
                body = json.loads(STORE_BODY.replace("%d %d", f"0 {i} {uuid.uuid4().hex}"))
                started = time.perf_counter()
                http.post(AGENT, json=body).raise_for_status()
                if i >= WARMUP:
                    spent.append((time.perf_counter() - started) * 1000)
        cpu = sides_.cpu_seconds(server.pid) - cpu
        if apart is not None:
            apart_cpu = sides_.cpu_seconds(apart.pid) - apart_cpu
        seconds = time.perf_counter() - began
        embedded = before - sides_.backlog(url, tree) + args.requests + WARMUP
        return {
            "store ms": figures(spent),
            "server cpu ms per store": round(cpu * 1000 / args.requests, 2),
            "drainer cpu ms per store": round(apart_cpu * 1000 / args.requests, 2),
            "embedded per s meanwhile": round(embedded / seconds, 1),
            "load average": sides_.load_average(),
        }
    finally:
        stop(apart)
        sides_.clean_up(server, drop, tmp)


def wake_phase(
    template: str, tree: Path, kind: str, args: argparse.Namespace, port: int
) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-apart-"))
    url, drop = database("postgresql", tmp, template)
    server = apart = beside = None
    try:
        facts = json.loads(sides_.in_side(tree, PREPARE, url, "idle"))
        server = serve(tree, url, port, worker=kind == "thread")
        if kind == "apart":
            apart = drainer(tree, url, args.poll_ms / 1000, args.nice)
        time.sleep(IDLE_SETTLE_SECONDS)
        used = sides_.cpu_seconds(server.pid)
        apart_used = sides_.cpu_seconds(apart.pid) if apart else 0.0
        time.sleep(args.idle)
        idle = (sides_.cpu_seconds(server.pid) - used) / args.idle
        apart_idle = (sides_.cpu_seconds(apart.pid) - apart_used) / args.idle if apart else 0.0
        if args.beside:
            beside = subprocess.Popen(
                [sys.executable, "-c", BESIDE, f"http://127.0.0.1:{port}", facts["key"]]
                + [str(tmp / "stop"), str(args.beside)],
                env=sides_.side_env(tree),
                cwd=tree,
                stdout=subprocess.PIPE,
            )
            time.sleep(1.0)
        found: list[float] = []
        lost = 0
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": facts["key"]}, timeout=60
        ) as http:
            for i in range(args.wake):
                body = json.loads(STORE_BODY.replace("%d %d", f"wake {i} {uuid.uuid4().hex}"))
                stored = http.post(AGENT, json=body)
                stored.raise_for_status()
                memory_id, began = stored.json()["data"]["id"], time.perf_counter()
                query = {"query": body["memory"]["content"], "mode": "semantic", "limit": 5}
                while True:
                    answer = http.get(f"{AGENT}/search", params=query).json()
                    if any(row["id"] == memory_id for row in answer["data"]):
                        break
                    if time.perf_counter() - began > GIVE_UP_SECONDS:
                        lost += 1  # counted as found at GIVE_UP_SECONDS
                        break
                    time.sleep(0.005)
                found.append(time.perf_counter() - began)
        result: dict[str, Any] = {
            "idle CPU, share of a core (server, drainer)": [round(idle, 4), round(apart_idle, 4)],
            "store to found by meaning s": {
                f"p{p}": round(float(np.percentile(found, p)), 3) for p in (50, 95, 99)
            },
            f"not found in {GIVE_UP_SECONDS} s": lost,
        }
        if beside is not None:
            (tmp / "stop").touch()
            spent = json.loads(beside.communicate(timeout=60)[0])
            result["stores beside"] = len(spent)
            result["stores beside ms"] = figures(spent)
        result["load average"] = sides_.load_average()
        return result
    finally:
        stop(apart)
        sides_.clean_up(server, drop, tmp, beside)


def run(
    backend: str, template: str, sides: dict[str, Path], args: argparse.Namespace
) -> dict[str, Any]:
    if backend != "postgresql":
        raise SystemExit("PostgreSQL only: on SQLite the two processes share the write lock")
    tree = next(iter(sides.values()))
    port = bench_port(19700 + os.getpid() % 200)
    kinds = ["thread", "apart", "none"]
    found: dict[str, list[dict[str, Any]]] = {}
    for round_ in range(args.rounds if args.requests else 0):
        for kind in kinds if round_ % 2 == 0 else kinds[::-1]:
            result = store_phase(template, tree, kind, args, port)
            found.setdefault(f"store, {kind}", []).append(result)
            print(kind, result, file=sys.stderr, flush=True)
    if args.wake:
        for round_ in range(args.rounds):
            for kind in kinds[:2] if round_ % 2 == 0 else kinds[1::-1]:
                result = wake_phase(template, tree, kind, args, port)
                found.setdefault(f"wake, {kind}", []).append(result)
                print("wake", kind, result, file=sys.stderr, flush=True)
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
        if key.startswith("store")
    }
    return {"summary": summary, "runs": found}


if __name__ == "__main__":
    sides_.main(
        __doc__,
        run,
        requests=400,
        rounds=2,
        wake=0,
        beside=0,
        idle=10,
        nice=19,
        **{"poll-ms": 1000},
    )
