"""Two versions of Mnemos side by side, one request to each in turn: the search rows of
`bench.run --suite vectors`, on a machine shared with other work, where runs minutes apart see
different loads. Each side is a source tree (its `src` and `bench`): it copies the template,
migrates it, fills the bench's synthetic vectors with its own layout (`bench.vectors.fill`) and
serves it (`mnemos serve --workers 1`, its embedding worker idle); then one client asks each
search of each side in alternation, so both sides see the same load at the same moments.

    python -m bench.ab_search --side before=/tmp/old --side after=. \\
        --template postgresql=DATABASE --template sqlite=FILE --requests 60
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
from pathlib import Path
from typing import Any

import httpx

from bench import vectors
from bench.run import bench_port, database

PREPARE = """
import json, sys
from bench.dataset import reuse
from bench.run import settle
from bench import vectors
from mnemos.config import Settings
from mnemos.storage import migrate, open_store
settings = Settings(database_url=sys.argv[1])
migrate(settings)
store = open_store(settings)
data = reuse(store)
vectors.fill(store, data)
settle(store)
store.close()
print(json.dumps({"key": data.big_agent_key}))
"""

SEARCH = vectors.SEARCH
QUESTION = vectors.QUESTION
ROWS: dict[str, dict[str, str]] = {
    "semantic, one agent": {"query": QUESTION, "mode": "semantic"},
    "semantic, org-wide": {"query": QUESTION, "mode": "semantic", "memory_scope": "org"},
    "semantic, org-wide, filter matching nothing": {
        "query": QUESTION,
        "mode": "semantic",
        "memory_scope": "org",
        "segment": "tool",
    },
    "hybrid 'harbor', one agent": {"query": "harbor"},
    "hybrid 'harbor', org-wide": {"query": "harbor", "memory_scope": "org"},
}


def side_env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{tree / 'src'}:{tree}"}


def copy(backend: str, template: str, tmp: Path, name: str) -> tuple[str, Any]:
    folder = tmp / name
    folder.mkdir()
    return database(backend, folder, template)


def run(backend: str, template: str, sides: dict[str, Path], requests: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-ab-"))
    servers: list[subprocess.Popen[bytes]] = []
    drops = []
    try:
        bases: dict[str, tuple[str, str]] = {}
        for index, (name, tree) in enumerate(sides.items()):
            url, drop = copy(backend, template, tmp, name)
            drops.append(drop)
            prepared = subprocess.run(
                [sys.executable, "-c", PREPARE, url],
                env=side_env(tree),
                cwd=tree,
                check=True,
                capture_output=True,
                text=True,
            )
            key = json.loads(prepared.stdout.strip().splitlines()[-1])["key"]
            port = bench_port(19100 + os.getpid() % 500) + index
            env = {**side_env(tree), "MNEMOS_DATABASE_URL": url}
            env["MNEMOS_RATE_LIMIT_PER_MINUTE"] = "0"
            servers.append(
                subprocess.Popen(
                    [sys.executable, "-m", "mnemos", "serve", "--port", str(port)]
                    + ["--workers", "1", "--log-level", "warning"],
                    env=env,
                    cwd=tree,
                )
            )
            bases[name] = (f"http://127.0.0.1:{port}", key)
        for base, _ in bases.values():
            for _ in range(300):
                try:
                    if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
        found: dict[str, Any] = {}
        clients = {
            name: httpx.Client(base_url=base, headers={"X-API-Key": key}, timeout=60)
            for name, (base, key) in bases.items()
        }
        for row, params in ROWS.items():
            spent: dict[str, list[float]] = {name: [] for name in sides}
            for attempt in range(requests + 5):
                for name, client in clients.items():
                    began = time.perf_counter()
                    client.get(SEARCH, params=params).raise_for_status()
                    if attempt >= 5:
                        spent[name].append((time.perf_counter() - began) * 1000)
            found[row] = {name: vectors.percentiles(ms) for name, ms in spent.items()}
            print(backend, row, found[row], file=sys.stderr, flush=True)
        for client in clients.values():
            client.close()
        return found
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=60)
        for drop in drops:
            drop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--side", action="append", required=True, metavar="NAME=TREE")
    parser.add_argument("--template", action="append", required=True, metavar="BACKEND=SOURCE")
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    sides = {item.split("=", 1)[0]: Path(item.split("=", 1)[1]).resolve() for item in args.side}
    results: dict[str, Any] = {"sides": {name: str(tree) for name, tree in sides.items()}}
    for item in args.template:
        backend, source = item.split("=", 1)
        load = os.getloadavg()
        results[backend] = run(backend, source, sides, args.requests)
        results[backend]["load average at start"] = [round(x, 2) for x in load]
    text = json.dumps(results, indent=2)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
