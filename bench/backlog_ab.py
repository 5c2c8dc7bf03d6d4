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
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench import vectors
from bench.ab_search import side_env
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

BACKLOG = """
import sys
from mnemos.config import Settings
from mnemos.storage import open_store
store = open_store(Settings(database_url=sys.argv[1]))
print(store.vector_backlog())
store.close()
"""


def backlog(url: str, tree: Path) -> int:
    done = subprocess.run(
        [sys.executable, "-c", BACKLOG, url],
        env=side_env(tree),
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout.strip().splitlines()[-1])


def phase(backend: str, template: str, tree: Path, requests: int, port: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-backlog-"))
    url, drop = database(backend, tmp, template)
    server = None
    try:
        prepared = subprocess.run(
            [sys.executable, "-c", PREPARE, url],
            env=side_env(tree),
            cwd=tree,
            check=True,
            capture_output=True,
            text=True,
        )
        facts = json.loads(prepared.stdout.strip().splitlines()[-1])
        env = {**side_env(tree), "MNEMOS_DATABASE_URL": url, "MNEMOS_RATE_LIMIT_PER_MINUTE": "0"}
        env["MNEMOS_EMBEDDER"] = "local"
        server = subprocess.Popen(
            [sys.executable, "-m", "mnemos", "serve", "--port", str(port)]
            + ["--workers", "1", "--log-level", "warning"],
            env=env,
            cwd=tree,
        )
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        for _ in range(100):  # until the worker has loaded its model and is embedding
            if backlog(url, tree) < facts["backlog"]:
                break
            time.sleep(0.2)
        before, began = backlog(url, tree), time.perf_counter()
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
        after = backlog(url, tree)
        return {
            "store ms": vectors.percentiles(spent["store"]),
            "list ms": vectors.percentiles(spent["list"]),
            "backlog at start": facts["backlog"],
            "embedded per s meanwhile": round((before - after + requests + 5) / seconds, 1),
            "load average": [round(x, 2) for x in os.getloadavg()],
        }
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
        drop()
        shutil.rmtree(tmp, ignore_errors=True)


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def run(
    backend: str, template: str, sides: dict[str, Path], requests: int, rounds: int
) -> dict[str, Any]:
    port = bench_port(19600 + os.getpid() % 300)
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    for round_ in range(rounds):
        order = list(sides) if round_ % 2 == 0 else list(sides)[::-1]
        for name in order:
            found[name].append(phase(backend, template, sides[name], requests, port))
            print(backend, name, found[name][-1], file=sys.stderr, flush=True)
    summary = {
        name: {
            f"{what} {p} ms (median of rounds)": median([r[f"{what} ms"][p] for r in runs])
            for what in ("store", "list")
            for p in ("p50", "p95")
        }
        | {"embedded per s": median([r["embedded per s meanwhile"] for r in runs])}
        for name, runs in found.items()
    }
    return {"summary": summary, "rounds": found}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--side", action="append", required=True, metavar="NAME=TREE")
    parser.add_argument("--template", action="append", required=True, metavar="BACKEND=SOURCE")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    sides = {item.split("=", 1)[0]: Path(item.split("=", 1)[1]).resolve() for item in args.side}
    results: dict[str, Any] = {"sides": {name: str(tree) for name, tree in sides.items()}}
    for item in args.template:
        backend, source = item.split("=", 1)
        results[backend] = run(backend, source, sides, args.requests, args.rounds)
        results[backend]["load average at start"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(results, indent=2)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
