"""Operations benchmark: export and import rates, and what metrics cost the list path.

    python -m bench.ops --memories 100000 --backend sqlite --backend postgresql

Loads the benchmark's seeded data set into SQLite, exports it (`mnemos export`'s code path), and
imports the file into a fresh database of each backend given (`mnemos import`'s code path),
reporting rows per second and memories per second. Then, on SQLite with the same data, serves
the agent list (~10,000 memories) from two servers at once, `MNEMOS_METRICS` off and on, asked
in turn, and reports p50s and their ratio (`--rounds 0` skips that part). Writes
`bench/results/<date>/import/ops.json` (`--out`, `--name`). Loopback only; every loop is bounded.

Each import runs as a process of its own (`bench.import_once`). `--export FILE` imports that
file (made first if missing) instead of a new export; `--baseline DIR` imports it with the Mnemos
source tree at DIR too (e.g. `git archive main src | tar -x -C DIR`), before this one, into a
fresh database of the same backend, and reports the speed-up: before and after in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
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

CPU_FIELDS = ("ru_utime", "ru_stime")
RESULTS = Path(__file__).parent / "results" / "2026-12-02" / "import"


def transfer(
    count: int, backends: list[str], tmp: Path, export: Path | None, baseline: Path | None
) -> tuple[dict[str, Any], str, str | None]:
    """Export the data set (unless `export` exists), then import it into each backend, with
    the code at `baseline` too when given."""
    found: dict[str, Any] = {"import": {}}
    dump = export or tmp / "export.ndjson"
    source, key = "", None
    if not dump.exists():
        source, _ = database("sqlite", tmp)
        settings = Settings(database_url=source)
        migrate(settings)
        store = open_store(settings)
        key = load(store, count).big_agent_key
        store.close()
        started, cpu = time.perf_counter(), time.process_time()
        with dump.open("wb") as out:
            summary = export_database(source, out)
        export_seconds = time.perf_counter() - started
        export_cpu = time.process_time() - cpu
        rows = sum(summary.rows.values())
        found["export"] = {
            "rows": rows,
            "seconds": round(export_seconds, 2),
            "rows_per_second": round(rows / export_seconds),
            "bytes": dump.stat().st_size,
            "cpu_seconds": round(export_cpu, 2),
        }
    versions = {"after": None, **({"before": baseline} if baseline else {})}
    for backend in backends:
        for version, code in sorted(versions.items(), reverse=True):  # before, then after
            found["import"].setdefault(backend, {})[version] = import_row(
                backend, tmp / f"target-{backend}-{version}", dump, code
            )
            print(f"  import into {backend}, {version}: {found['import'][backend][version]}",
                  file=sys.stderr)  # fmt: skip
        if baseline:
            rows = found["import"][backend]
            rows["speedup"] = round(rows["before"]["seconds"] / rows["after"]["seconds"], 2)
    return found, source, key


def import_row(backend: str, target_dir: Path, dump: Path, code: Path | None) -> dict[str, Any]:
    """One import of `dump` into a fresh database of `backend`, as a process of its own
    (`bench.import_once`), with the Mnemos source tree `code` first on its path if given."""
    target_dir.mkdir()
    url, drop = database(backend, target_dir)
    try:
        migrate(Settings(database_url=url))
        env = dict(os.environ)
        if code is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(code / "src"), str(Path.cwd())])
        load_before = os.getloadavg()[0]  # other work on the shared machine
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run(
            [sys.executable, "-m", "bench.import_once", url, str(dump)],
            env=env,
            stdout=subprocess.PIPE,
            check=True,
        ).stdout
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = json.loads(out)
        process_cpu = sum(getattr(after, f) - getattr(children, f) for f in CPU_FIELDS)
        memories, seconds = done["memories"], done["seconds"]
        return {
            "rows": done["rows"],
            "memories": memories,
            "seconds": round(seconds, 2),
            "memories_per_second": round(memories / seconds),
            "rows_per_second": round(done["rows"] / seconds),
            # The importing process's CPU time: all of the work on SQLite (in-process), only the
            # client's share on PostgreSQL. On a shared machine wall time waits for cores.
            "cpu_seconds": round(done["cpu_seconds"], 2),
            "memories_per_cpu_second": round(memories / done["cpu_seconds"]),
            "load_average_1m_before": round(load_before, 2),
            "load_average_1m_after": round(os.getloadavg()[0], 2),
            # The whole child (interpreter start, and any process of its own), for comparison.
            "process_cpu_seconds": round(process_cpu, 2),
            "code": done["code"],
        }
    finally:
        drop()


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
    parser.add_argument("--name", default="ops.json", help="the results file in --out")
    parser.add_argument(
        "--export", type=Path, help="the export file to import: made if missing, else reused"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a Mnemos source tree (e.g. `git archive main`) whose import runs too, for ratios",
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-bench-ops-"))
    try:
        found, source, key = transfer(
            args.memories, args.backend or ["sqlite"], tmp, args.export, args.baseline
        )
        if args.rounds and key is not None:
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
    (args.out / args.name).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
