"""Two versions of Mnemos side by side, one request to each in turn: the search rows of
`bench.run --suite vectors`, on a machine shared with other work, where runs minutes apart see
different loads. Each side is a source tree (its `src` and `bench`): it copies the template,
migrates it, fills the bench's synthetic vectors with its own layout (`bench.vectors.fill`) and
serves it (`mnemos serve --workers 1`, its embedding worker idle); then one client asks each
search of each side in alternation, so both sides see the same load at the same moments.

    python -m bench.ab_search --side before=/tmp/old --side after=. \\
        --template postgresql=DATABASE --template sqlite=FILE --requests 60

The same tree may be two sides that differ in a setting of their servers:
`--side one=. --side two=. --side-env one=MNEMOS_EMBEDDER_THREADS=1 --side-env two=...=2`.
`--rows WORD` keeps the rows whose label holds WORD (repeatable). Each row also records each
side's answer (the ids in order, from its first request) and whether they are all equal.
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

from bench import sides as sides_
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
    "hybrid 'marigold', one agent": {"query": "marigold"},
    "hybrid 'marigold', org-wide": {"query": "marigold", "memory_scope": "org"},
    "hybrid 'zebrafinch', one agent": {"query": "zebrafinch"},
    "hybrid 'zebrafinch', org-wide": {"query": "zebrafinch", "memory_scope": "org"},
    **{
        f"keyword '{word}', {where}": {"query": word, "mode": "keyword", **scope}
        for word in ("harbor", "marigold", "zebrafinch")
        for where, scope in (("one agent", {}), ("org-wide", {"memory_scope": "org"}))
    },
}


def copy(backend: str, template: str, tmp: Path, name: str) -> tuple[str, Any]:
    folder = tmp / name
    folder.mkdir()
    return database(backend, folder, template)


def run(
    backend: str, template: str, sides: dict[str, Path], args: argparse.Namespace
) -> dict[str, Any]:
    requests = args.requests
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-ab-"))
    servers: list[subprocess.Popen[bytes]] = []
    drops = []
    try:
        bases: dict[str, tuple[str, str]] = {}
        for index, (name, tree) in enumerate(sides.items()):
            url, drop = copy(backend, template, tmp, name)
            drops.append(drop)
            key = json.loads(sides_.in_side(tree, PREPARE, url))["key"]
            port = bench_port(19100 + os.getpid() % 500) + index
            servers.append(sides_.serve(tree, url, port, **args.side_envs[name]))
            bases[name] = (f"http://127.0.0.1:{port}", key)
        found: dict[str, Any] = {}
        clients = {
            name: httpx.Client(base_url=base, headers={"X-API-Key": key}, timeout=60)
            for name, (base, key) in bases.items()
        }
        rows = {
            row: params
            for row, params in ROWS.items()
            if not args.rows or any(word in row for word in args.rows)
        }
        for row, params in rows.items():
            spent: dict[str, list[float]] = {name: [] for name in sides}
            answers: dict[str, list[str]] = {}
            for attempt in range(requests + 5):
                for name, client in clients.items():
                    # A warm-up reads the first page of 50 (the answer compared); timed
                    # requests ask for the default page, as before.
                    asked = params if attempt >= 5 else {**params, "limit": 50}
                    began = time.perf_counter()
                    answer = client.get(SEARCH, params=asked)
                    answer.raise_for_status()
                    if attempt >= 5:
                        spent[name].append((time.perf_counter() - began) * 1000)
                    else:
                        answers.setdefault(name, [m["id"] for m in answer.json()["data"]])
            found[row] = {name: vectors.percentiles(ms) for name, ms in spent.items()}
            found[row]["answers"] = {name: len(ids) for name, ids in answers.items()}
            found[row]["same answer"] = len({tuple(ids) for ids in answers.values()}) == 1
            print(backend, row, found[row], file=sys.stderr, flush=True)
        for client in clients.values():
            client.close()
        return found
    finally:
        for server in servers:
            sides_.stop(server)
        for drop in drops:
            drop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sides_.main(__doc__, run, requests=60, rows=[])
