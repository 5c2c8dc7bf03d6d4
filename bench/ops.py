"""Operations benchmark: export and import rates, and what metrics cost the list path.

    python -m bench.ops --memories 100000 --backend sqlite --backend postgresql

Loads the benchmark's seeded data set into SQLite, exports it (`mnemos export`'s code path), and
imports the file into a fresh database of each backend given (`mnemos import`'s code path),
reporting rows per second and memories per second. Then, on SQLite with the same data, serves
the agent list (~10,000 memories) from two servers at once, `MNEMOS_METRICS` off and on, asked
in turn, and reports p50s and their ratio (`--rounds 0` skips that part). Writes
`bench/results/<date>/import/ops.json`. Loopback only; every loop is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.dataset import load
from bench.run import AGENT, database
from mnemos.config import Settings
from mnemos.storage import migrate, open_store
from mnemos.storage.transfer import export_database
from mnemos.storage.transfer_import import import_database

RESULTS = Path(__file__).parent / "results" / "2026-12-02" / "import"


def transfer(count: int, backends: list[str], tmp: Path) -> tuple[dict[str, Any], str, str]:
    source, _ = database("sqlite", tmp)
    settings = Settings(database_url=source)
    migrate(settings)
    store = open_store(settings)
    data = load(store, count)
    store.close()
    dump = tmp / "export.ndjson"
    started, cpu = time.perf_counter(), time.process_time()
    with dump.open("wb") as out:
        summary = export_database(source, out)
    export_seconds = time.perf_counter() - started
    export_cpu = time.process_time() - cpu
    rows = sum(summary.rows.values())
    found: dict[str, Any] = {
        "export": {
            "rows": rows,
            "seconds": round(export_seconds, 2),
            "rows_per_second": round(rows / export_seconds),
            "bytes": dump.stat().st_size,
            "cpu_seconds": round(export_cpu, 2),
        },
        "import": {},
    }
    for backend in backends:
        target_dir = tmp / f"target-{backend}"
        target_dir.mkdir()
        url, drop = database(backend, target_dir)
        try:
            migrate(Settings(database_url=url))
            load_before = os.getloadavg()[0]  # other work on the shared machine
            started, cpu = time.perf_counter(), time.process_time()
            with dump.open("rb") as lines:
                imported = import_database(url, lines)
            seconds = time.perf_counter() - started
            cpu_seconds = time.process_time() - cpu
            found["import"][backend] = {
                "rows": sum(imported.rows.values()),
                "memories": imported.rows.get("memories", 0),
                "seconds": round(seconds, 2),
                "memories_per_second": round(imported.rows.get("memories", 0) / seconds),
                "rows_per_second": round(sum(imported.rows.values()) / seconds),
                # This process's CPU time: all of the work on SQLite (in-process), only the
                # client's share on PostgreSQL. On a shared machine wall time waits for cores.
                "cpu_seconds": round(cpu_seconds, 2),
                "memories_per_cpu_second": round(imported.rows.get("memories", 0) / cpu_seconds),
                "load_average_1m_before": round(load_before, 2),
            }
            print(f"  import into {backend}: {found['import'][backend]}", file=sys.stderr)
        finally:
            drop()
    return found, source, data.big_agent_key


def serve(url: str, port: int, metrics: bool) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "MNEMOS_DATABASE_URL": url,
        "MNEMOS_RATE_LIMIT_PER_MINUTE": "0",
        "MNEMOS_METRICS": "on" if metrics else "off",
    }
    command = [sys.executable, "-m", "mnemos", "serve", "--port", str(port)]
    process = subprocess.Popen([*command, "--log-level", "warning"], env=env)
    for _ in range(300):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("server did not start")


def metrics_cost(url: str, key: str, requests: int, rounds: int) -> dict[str, Any]:
    """p50 of the agent list with metrics off and on: two servers on the same database at once,
    asked in turn (off, on, off, on, ...), so that load elsewhere on the machine falls on both
    alike; `rounds` times with fresh servers."""
    samples: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(rounds):
        ports = {"off": 19000 + os.getpid() % 500, "on": 19500 + os.getpid() % 500}
        servers = {mode: serve(url, port, mode == "on") for mode, port in ports.items()}
        clients = {
            mode: httpx.Client(
                base_url=f"http://127.0.0.1:{port}", timeout=60, headers={"X-API-Key": key}
            )
            for mode, port in ports.items()
        }
        try:
            for i in range(20 + requests):
                for mode, http in clients.items():
                    started = time.perf_counter()
                    response = http.get(AGENT, params={"limit": 20})
                    if i >= 20:  # after a warm-up
                        samples[mode].append(time.perf_counter() - started)
                    if response.status_code != 200:
                        raise RuntimeError(response.text[:200])
        finally:
            for http in clients.values():
                http.close()
            for server in servers.values():
                server.terminate()
                server.wait(timeout=60)
    p50 = {mode: statistics.median(values) * 1000 for mode, values in samples.items()}
    return {
        "path": "agent list (~10,000 memories), limit 20, 1 client, servers asked in turn",
        "requests_each": len(samples["off"]),
        "p50_ms_off": round(p50["off"], 3),
        "p50_ms_on": round(p50["on"], 3),
        "ratio_on_off": round(p50["on"] / p50["off"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgresql"])
    parser.add_argument("--requests", type=int, default=500, help="per metrics round and mode")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-bench-ops-"))
    try:
        found, source, key = transfer(args.memories, args.backend or ["sqlite"], tmp)
        if args.rounds:
            found["metrics"] = metrics_cost(source, key, args.requests, args.rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_average": os.getloadavg(),  # other work on the machine during the run
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
        "memories": args.memories,
        **found,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ops.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
