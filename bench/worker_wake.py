"""An idle server's embedding worker, versions side by side: the CPU a server spends while
nobody calls it, and how long a stored memory takes to be found by meaning.

    python -m bench.worker_wake --side before=/tmp/old --side after=. \\
        --template sqlite=FILE --template postgresql=DATABASE --requests 30 --rounds 2

Per backend, round and side (the order reversed every other round): a fresh copy of the
template with its embedding queue emptied, served with the side's code (`mnemos serve
--workers 1`, the local embedder); after the worker has loaded its model, the server's CPU
(its processes' user + system time, from /proc) over `--idle` seconds without a request; then
one client stores `--requests` memories one after the other, each followed by semantic searches
for its own words every 5 ms until it is found (seconds from the store's answer). With
`--beside RATE`, another client (a process of its own) stores RATE memories a second (other
words) for as long as that lasts, so the worker meets requests in flight
(`mnemos.indexer.InFlight`); reported beside: that client's store p50 / p95 / p99 ms.
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
from bench.store_latency import IDLE_SETTLE_SECONDS, PREPARE

BESIDE = """
import json, sys, time, uuid
import httpx
from bench.run import AGENT, STORE_BODY
base, key, stop, rate = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
spent = []
began = time.perf_counter()
with httpx.Client(base_url=base, headers={"X-API-Key": key}, timeout=60) as http:
    i = 0
    while True:
        time.sleep(max(0.0, began + i / rate - time.perf_counter()))
        try:
            open(stop).close()
            break
        except FileNotFoundError:
            pass
        body = json.loads(STORE_BODY)  # unlike the probes' words: not among their answers
        body["memory"]["content"] = f"Invoice reminder {i} for the accounting team, {uuid.uuid4().hex}"
        started = time.perf_counter()
        http.post(AGENT, json=body).raise_for_status()
        spent.append((time.perf_counter() - started) * 1000)
        i += 1
print(json.dumps(spent))
"""


def side(backend: str, template: str, tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-wake-"))
    url, drop = database(backend, tmp, template)
    server = None
    beside: subprocess.Popen[bytes] | None = None
    port = bench_port(19900 + os.getpid() % 90)
    try:
        facts = json.loads(sides_.in_side(tree, PREPARE, url, "idle"))
        server = sides_.serve(tree, url, port, MNEMOS_EMBEDDER="local")
        time.sleep(IDLE_SETTLE_SECONDS)
        used = sides_.cpu_seconds(server.pid)
        time.sleep(args.idle)
        idle = (sides_.cpu_seconds(server.pid) - used) / args.idle
        found: list[float] = []
        if args.beside:
            beside = subprocess.Popen(
                [sys.executable, "-c", BESIDE, f"http://127.0.0.1:{port}", facts["key"]]
                + [str(tmp / "stop"), str(args.beside)],
                env=sides_.side_env(tree),
                cwd=tree,
                stdout=subprocess.PIPE,
            )
            time.sleep(1.0)  # its first stores (and the worker's embedding of them) under way
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": facts["key"]}, timeout=60
        ) as http:
            for i in range(args.requests):
                words = f"wake {i} {uuid.uuid4().hex}"
                body = json.loads(STORE_BODY.replace("%d %d", words))
                stored = http.post(AGENT, json=body)
                stored.raise_for_status()
                memory_id, began = stored.json()["data"]["id"], time.perf_counter()
                query = {"query": body["memory"]["content"], "mode": "semantic", "limit": 5}
                while True:
                    answer = http.get(f"{AGENT}/search", params=query).json()
                    if any(row["id"] == memory_id for row in answer["data"]):
                        break
                    if time.perf_counter() - began > 30:
                        raise RuntimeError("a stored memory was not found by meaning in 30 s")
                    time.sleep(0.005)
                found.append(time.perf_counter() - began)
        result: dict[str, Any] = {
            "idle CPU, share of a core": round(idle, 4),
            "store to found by meaning s": {
                f"p{p}": round(float(np.percentile(found, p)), 3) for p in (50, 95, 99)
            },
        }
        if beside is not None:
            (tmp / "stop").touch()
            spent = json.loads(beside.communicate(timeout=60)[0])
            result["stores beside"] = len(spent)
            result["stores beside ms"] = {
                f"p{p}": round(float(np.percentile(spent, p)), 2) for p in (50, 95, 99)
            }
        result["load average"] = sides_.load_average()
        return result
    finally:
        sides_.clean_up(server, drop, tmp, beside)


def run(
    backend: str, template: str, sides: dict[str, Path], args: argparse.Namespace
) -> dict[str, Any]:
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    for round_ in range(args.rounds):
        for name in list(sides) if round_ % 2 == 0 else list(sides)[::-1]:
            result = side(backend, template, sides[name], args)
            found[name].append(result)
            print(backend, name, result, file=sys.stderr, flush=True)
    return found


if __name__ == "__main__":
    sides_.main(__doc__, run, requests=30, rounds=2, idle=20, beside=0)
