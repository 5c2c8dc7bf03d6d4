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

    python -m bench.store_latency --side main=. --template sqlite=FILE --requests 400 \
        --rate 10 --rate 25 --rate 50 --rate 100 --rate closed --phase idle --phase none

With `--rate` (stores a second; `closed`: the loop above), steady rates instead: per round,
phase (`--phase`, default idle and none) and side, one copy and one server, and each rate in
turn once the worker's queue is empty, from an open-loop client (`bench.open_loop`: stores sent
at fixed times whether or not the earlier ones have answered). Reported per rate: p50 / p95 /
p99 ms from each store's scheduled time (queueing included: no coordinated omission) and from
its send, the server's CPU per store, the queue about a second after the last answer. The
order of phases, sides and rates is reversed every other round.
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

from bench import open_loop
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
        headers = {"X-API-Key": facts["key"]}
        spent, cpu = closed_loop(f"http://127.0.0.1:{port}", headers, requests, server.pid)
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


def store(http: httpx.Client, i: int, tag: str = "0") -> httpx.Response:
    """The i-th store of a run: a new memory, its words unique."""
    body = json.loads(STORE_BODY.replace("%d %d", f"{tag} {i} {uuid.uuid4().hex}"))
    return http.post(AGENT, json=body)


def closed_loop(
    base: str, headers: dict[str, str], requests: int, pid: int, tag: str = "0"
) -> tuple[list[float], float]:
    """One client storing back to back: each measured store's ms, and the server's CPU
    seconds over the measured stores."""
    spent: list[float] = []
    cpu = 0.0
    with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
        for i in range(requests + WARMUP):
            if i == WARMUP:
                cpu = sides_.cpu_seconds(pid)
            started = time.perf_counter()
            store(http, i, tag).raise_for_status()
            if i >= WARMUP:
                spent.append((time.perf_counter() - started) * 1000)
    return spent, sides_.cpu_seconds(pid) - cpu


def steady(
    backend: str,
    template: str,
    tree: Path,
    kind: str,
    rates: list[str],
    requests: int,
    port: int,
    **env: str,
) -> dict[str, dict[str, Any]]:
    """One copy of the template and one server for the phase `kind`; each of `rates` in turn
    (stores a second from the open-loop client, or "closed": the closed loop), each after the
    worker's queue has emptied."""
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-rate-"))
    url, drop = database(backend, tmp, template)
    server = None
    try:
        facts = json.loads(sides_.in_side(tree, PREPARE, url, kind))
        server = sides_.serve(tree, url, port, **{"MNEMOS_EMBEDDER": PHASES[kind], **env})
        time.sleep(IDLE_SETTLE_SECONDS)
        base, headers = f"http://127.0.0.1:{port}", {"X-API-Key": facts["key"]}
        found: dict[str, dict[str, Any]] = {}
        for rate in rates:
            for _ in range(120 if PHASES[kind] != "none" else 0):  # the last rate's
                if sides_.backlog(url, tree) == 0:  # stores embedded (at most a minute)
                    break
                time.sleep(0.5)
            load = sides_.load_average()
            result: dict[str, Any]
            if rate == "closed":
                spent, cpu = closed_loop(base, headers, requests, server.pid, rate)
                result = {"store ms": figures(spent)}
            else:
                result, cpu = at_rate(base, headers, float(rate), requests, server.pid)
            result |= {
                "server cpu ms per store": round(cpu * 1000 / requests, 2),
                "load average before": load,
                "load average after": sides_.load_average(),
            }
            if PHASES[kind] != "none":
                result["queued about 1 s after"] = sides_.backlog(url, tree)
            found[rate] = result
        return found
    finally:
        sides_.clean_up(server, drop, tmp)


def at_rate(
    base: str, headers: dict[str, str], rate: float, requests: int, pid: int
) -> tuple[dict[str, Any], float]:
    """`requests` stores (after `WARMUP`) sent `rate` a second by the open-loop client: their
    figures, and the server's CPU seconds from the first measured send to the last answer."""
    cpu = [0.0]

    def mark(i: int) -> None:
        if i == WARMUP:
            cpu[0] = sides_.cpu_seconds(pid)

    timings = open_loop.run(
        base, headers, rate, requests + WARMUP, lambda http, i: store(http, i, str(rate)), mark
    )
    used = sides_.cpu_seconds(pid) - cpu[0]
    return open_loop.describe(timings, WARMUP, figures), used


def in_order(items: list[str]) -> list[str]:
    return items


def reversed_order(items: list[str]) -> list[str]:
    return items[::-1]


def run_rates(
    backend: str, template: str, sides: dict[str, Path], args: argparse.Namespace, port: int
) -> dict[str, Any]:
    """`--rate`: per round, phase and side one server (`steady`), the order of the sides, of
    the phases and of the rates reversed every other round."""
    phases = args.phase or ["idle", "none"]
    found: dict[str, list[dict[str, Any]]] = {}
    for round_ in range(args.rounds):
        turn = in_order if round_ % 2 == 0 else reversed_order
        for kind in turn(phases):
            for name in turn(list(sides)):
                env = dict(args.side_envs.get(name, {}))
                results = steady(
                    backend,
                    template,
                    sides[name],
                    kind,
                    turn(args.rate),
                    args.requests,
                    port,
                    **env,
                )
                for rate, result in results.items():
                    key = f"{name}, worker {kind}, {rate if rate == 'closed' else rate + '/s'}"
                    found.setdefault(key, []).append(result | {"round": round_ + 1})
                    print(backend, key, result, file=sys.stderr, flush=True)
    summary: dict[str, dict[str, float]] = {}
    for key, runs in found.items():
        measures = ("store ms", "store ms from schedule", "store ms from send")
        summary[key] = {
            f"{measure} {p} (median of rounds)": sides_.median([r[measure][p] for r in runs])
            for measure in measures
            if measure in runs[0]
            for p in ("p50", "p95", "p99")
        } | {
            "server cpu ms per store (median of rounds)": sides_.median(
                [r["server cpu ms per store"] for r in runs]
            )
        }
    return {"summary": summary, "runs": found}


def run(
    backend: str, template: str, sides: dict[str, Path], args: argparse.Namespace
) -> dict[str, Any]:
    port = bench_port(19600 + os.getpid() % 300)
    if args.rate:
        return run_rates(backend, template, sides, args, port)
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
    sides_.main(__doc__, run, requests=300, rounds=2, normal=1, rate=[], phase=[])
