"""What the embedding worker costs a server: store latency with the worker on and off, measured
in the same run, and the server's memory once it has embedded and searched.

    python -m bench.embedding_worker --backend sqlite --backend postgresql \
        --out bench/results/2026-12-02/vectors/embedding-worker.json

Per backend, a fresh database and one server process (`mnemos serve --workers 1`), started
alternately with `MNEMOS_EMBEDDER=local` (the worker embeds every stored memory as it comes) and
`MNEMOS_EMBEDDER=none` (no worker, no embedder), `--rounds` times each, so a change in the
machine's load hits both alike. Each phase: one client stores `--stores` memories back to back
(each is queued for the worker), then, with the embedder on, the worker's backlog is drained
and 20 semantic searches run, and the server's resident memory is read (VmRSS, and the private
part from /proc/PID/smaps_rollup: file pages SQLite maps are shared, not private).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.run import AGENT, Call, Rss, database, python_load, start_server
from mnemos.config import Settings
from mnemos.domain import accounts
from mnemos.storage import migrate, open_store

SEARCH = "/api/v1/agent/memories/search"


def memory_of(pid: int) -> dict[str, int]:
    """The largest process of a server's family: VmRSS and private (anonymous + private file)
    MiB."""
    best: dict[str, int] = {"rss_mib": 0, "private_mib": 0}
    sampler = Rss(pid)
    sampler.stop.set()
    for member in sampler._family():
        fields = {}
        for line in Path(f"/proc/{member}/smaps_rollup").read_text().splitlines()[1:]:
            name, value = line.split(":", 1)
            fields[name] = int(value.split()[0]) // 1024
        private = fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
        if fields.get("Rss", 0) > best["rss_mib"]:
            best = {"rss_mib": fields["Rss"], "private_mib": private}
    return best


def phase(url: str, key: str, embedder: str, stores: int, port: int) -> dict[str, Any]:
    os.environ["MNEMOS_EMBEDDER"] = embedder
    server = start_server(url, port, 1)
    base = f"http://127.0.0.1:{port}"
    try:
        time.sleep(2)  # the worker loads its model after the server answers
        figures = python_load(base, Call("POST", AGENT, key, store=True), 1, stores)
        result: dict[str, Any] = {"store ms": figures.__dict__}
        if embedder != "none":
            with httpx.Client(base_url=base, headers={"X-API-Key": key}, timeout=60) as http:
                params = {"query": "where does the client like to sit?", "mode": "semantic"}
                for _ in range(20):
                    http.get(SEARCH, params=params).raise_for_status()
            result["memory"] = memory_of(server.pid)
        return result
    finally:
        server.terminate()
        server.wait(timeout=60)
        os.environ.pop("MNEMOS_EMBEDDER", None)


def run_backend(backend: str, stores: int, rounds: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-worker-"))
    url, drop = database(backend, tmp)
    try:
        settings = Settings(database_url=url)
        migrate(settings)
        store = open_store(settings)
        org = accounts.create_organization(store, "Bench")
        person = accounts.create_user(store, "Ann", "ann@bench.test", org.id)
        key = accounts.create_agent(store, person.user.id, "Writer", None).api_key
        store.close()
        port = 19000 + os.getpid() % 1000
        phases: dict[str, list[dict[str, Any]]] = {"worker on": [], "worker off": []}
        for _ in range(rounds):
            phases["worker on"].append(phase(url, key, "local", stores, port))
            phases["worker off"].append(phase(url, key, "none", stores, port))
        summary = {
            name: {
                "store p50 ms (median of rounds)": sorted(r["store ms"]["p50"] for r in runs)[
                    len(runs) // 2
                ],
                "store p95 ms (median of rounds)": sorted(r["store ms"]["p95"] for r in runs)[
                    len(runs) // 2
                ],
            }
            for name, runs in phases.items()
        }
        return {"backend": backend, "stores per phase": stores, "summary": summary, **phases}
    finally:
        drop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgresql"])
    parser.add_argument("--stores", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    results = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f} at start, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "runs": [run_backend(b, args.stores, args.rounds) for b in args.backend or ["sqlite"]],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(json.dumps([r["summary"] for r in results["runs"]], indent=1))


if __name__ == "__main__":
    main()
