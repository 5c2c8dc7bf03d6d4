"""Read replicas: list throughput with reads on a streaming replica against reads on the primary.

    python -m bench.replicas --memories 20000 --requests 3000 --rounds 2

Builds a throwaway PostgreSQL primary and a streaming replica of it on loopback
(`tests/pgcluster.py`), loads the benchmark data set on the primary, waits for the replica to
replay it, then measures one `mnemos serve` process in two settings, in alternating rounds:
`primary` (no replica configured) and `replica` (`MNEMOS_DATABASE_REPLICA_URLS` set: lists go to
the replica, credentials and write marks to the primary). Each round sends the same lists from 1
and from 8 clients (Python load generator, one connection per client). Where the reads ran is
counted from the servers' own statistics (scans of `memories` on each, settled after the server
stops). Both databases run on this machine, so the figures show the cost of the routing, not
the capacity a replica on its own machine adds. Results: `bench/results/<date>/replicas/`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from tests.pgcluster import Cluster, free_port, replica_pair, replica_scans, wait_for_replay

from bench.dataset import load
from bench.run import Call, Figures, python_load
from mnemos.config import Settings
from mnemos.storage import migrate, open_store

AGENT, HUMAN = "/api/v1/agent/memories", "/api/v1/me/memories"
RESULTS = Path(__file__).parent / "results" / "2026-12-01" / "replicas"


def serve(primary_url: str, replica_url: str | None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "MNEMOS_DATABASE_URL": primary_url, "MNEMOS_RATE_LIMIT_PER_MINUTE": "0"}
    env.pop("MNEMOS_DATABASE_REPLICA_URLS", None)
    if replica_url:
        env["MNEMOS_DATABASE_REPLICA_URLS"] = replica_url
    command = [sys.executable, "-m", "mnemos", "serve", "--port", str(port)]
    process = subprocess.Popen([*command, "--log-level", "warning"], env=env)
    base = f"http://127.0.0.1:{port}"
    want = {"configured": 1, "in_rotation": 1} if replica_url else None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            health = httpx.get(f"{base}/healthz", timeout=1).json()
            if health.get("replicas") == want:
                return process, base
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError("server did not start (or its replica never came into rotation)")


def settled(primary: Cluster, replica: Cluster) -> tuple[int, int]:
    """Scans of `memories` on (primary, replica), once every session has reported them."""
    others = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
    )
    deadline = time.monotonic() + 60
    while (primary.sql(others) or replica.sql(others)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return replica_scans(primary), replica_scans(replica)


def row(figures: Figures) -> dict[str, float]:
    return {"p50": figures.p50, "p95": figures.p95, "p99": figures.p99, "rate": figures.rate}


def measure(base: str, calls: dict[str, Call], requests: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, call in calls.items():
        results[name] = {
            "1 client": row(python_load(base, call, 1, requests // 4)),
            "8 clients": row(python_load(base, call, 8, requests)),
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--requests", type=int, default=3_000, help="per path, 8 clients")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    options = parser.parse_args()
    with replica_pair() as (primary, replica):
        primary.sql("CREATE DATABASE mnemos")
        primary_url, replica_url = primary.url("mnemos"), replica.url("mnemos")
        settings = Settings(database_url=primary_url)
        migrate(settings)
        store = open_store(settings)
        data = load(store, options.memories)
        store.close()
        primary.sql("VACUUM ANALYZE", "mnemos")
        wait_for_replay(primary, replica)
        calls = {
            "agent list, memory_scope=me": Call("GET", AGENT, data.big_agent_key, {"limit": "20"}),
            "person list, scope=all": Call("GET", HUMAN, data.person_key, {"limit": "20"}),
        }
        rounds: list[dict[str, Any]] = []
        for number in range(options.rounds):
            for where in ("primary", "replica"):
                before = settled(primary, replica)
                process, base = serve(primary_url, replica_url if where == "replica" else None)
                try:
                    results = measure(base, calls, options.requests)
                finally:
                    process.terminate()
                    process.wait(timeout=30)
                after = settled(primary, replica)
                scans = {"primary": after[0] - before[0], "replica": after[1] - before[1]}
                rounds.append(
                    {
                        "round": number + 1,
                        "reads on": where,
                        "results": results,
                        "memory scans": scans,
                    }
                )
                print(f"  round {number + 1}, reads on the {where}: {scans}", file=sys.stderr)
    run = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
        "memories": options.memories,
        "requests": options.requests,
        "rounds": rounds,
    }
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "replicas.json").write_text(json.dumps(run, indent=2) + "\n")
    print(markdown(run))


def markdown(run: dict[str, Any]) -> str:
    lines = [
        f"{run['memories']:,} memories; p50 / p95 / p99 ms, rate/s; one `mnemos serve` process",
        "",
        "| path | reads on | round | 1 client | 8 clients | memory scans primary / replica |",
        "|---|---|---|---|---|---|",
    ]
    for entry in run["rounds"]:
        scans = entry["memory scans"]
        for name, figures in entry["results"].items():
            cells = [
                f"{f['p50']:.2f} / {f['p95']:.2f} / {f['p99']:.2f}, {f['rate']:,.0f}/s"
                for f in (figures["1 client"], figures["8 clients"])
            ]
            lines.append(
                f"| {name} | {entry['reads on']} | {entry['round']} | {cells[0]} | {cells[1]} "
                f"| {scans['primary']:,} / {scans['replica']:,} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
