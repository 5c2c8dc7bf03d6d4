"""Two or more versions of Mnemos measured in turn: each side is a source tree (its `src` and
`bench`), run with its own code from this interpreter (`--side NAME=TREE`), on copies of the
templates an earlier `bench.run --keep-template` saved (`--template BACKEND=SOURCE`)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

TICKS = os.sysconf("SC_CLK_TCK")
Run = Callable[[str, str, dict[str, Path], argparse.Namespace], dict[str, Any]]


def side_env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{tree / 'src'}:{tree}"}


def in_side(tree: Path, script: str, *args: str) -> str:
    """The last line `script` printed, run with the side's code."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=side_env(tree),
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip().splitlines()[-1]


def serve(tree: Path, url: str, port: int, **env: str) -> subprocess.Popen[bytes]:
    """`mnemos serve --workers 1` with the side's code on `url`, once it answers /healthz."""
    server = subprocess.Popen(
        [sys.executable, "-m", "mnemos", "serve", "--port", str(port)]
        + ["--workers", "1", "--log-level", "warning"],
        env={**side_env(tree), "MNEMOS_DATABASE_URL": url, "MNEMOS_RATE_LIMIT_PER_MINUTE": "0"}
        | env,
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
    raise RuntimeError(f"the server of {tree} did not start")


BACKLOG = """
import sys
from mnemos.config import Settings
from mnemos.storage import open_store
store = open_store(Settings(database_url=sys.argv[1]))
print(store.vector_backlog())
store.close()
"""


def backlog(url: str, tree: Path) -> int:
    """Memories waiting to be embedded in the database at `url`, read with the side's code."""
    return int(in_side(tree, BACKLOG, url))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` and its children that are still running."""
    total = 0.0
    pids = [pid]
    while pids:
        current = pids.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICKS
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except FileNotFoundError:
            continue
        pids.extend(int(child) for child in children)
    return total


def load_average() -> list[float]:
    """The machine's load averages (1, 5, 15 minutes), recorded with each run's figures."""
    return [round(x, 2) for x in os.getloadavg()]


def clean_up(
    server: subprocess.Popen[bytes] | None,
    drop: Callable[[], None],
    tmp: Path,
    *beside: subprocess.Popen[Any] | None,
) -> None:
    """Kill the processes run `beside` a side (a client, a writer) that still run, stop its
    server (if it started), drop its database copy and its files."""
    for process in beside:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
    if server is not None:
        stop(server)
    drop()
    shutil.rmtree(tmp, ignore_errors=True)


def median(values: list[float]) -> float:
    """The middle value (the higher of two)."""
    return sorted(values)[len(values) // 2]


def stop(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    server.wait(timeout=60)


def main(doc: str | None, run: Run, **counts: int | list[str]) -> None:
    """Parse `--side`, `--template`, `--out` and the options `counts` (name=default: an
    integer, or a list for a repeatable option), run each template's backend, and print (and
    write) the results as JSON."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--side", action="append", required=True, metavar="NAME=TREE")
    parser.add_argument("--template", action="append", required=True, metavar="BACKEND=SOURCE")
    for name, default in counts.items():
        if isinstance(default, list):
            parser.add_argument(f"--{name}", action="append", default=default)
        else:
            parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument(
        "--side-env",
        action="append",
        default=[],
        metavar="NAME=VARIABLE=VALUE",
        help="an environment variable for one side's server (the same tree may be two sides)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    sides = {item.split("=", 1)[0]: Path(item.split("=", 1)[1]).resolve() for item in args.side}
    args.side_envs = {name: {} for name in sides}
    for item in args.side_env:
        name, variable, value = item.split("=", 2)
        args.side_envs[name][variable] = value
    results: dict[str, Any] = {
        "sides": {name: str(tree) for name, tree in sides.items()},
        "side environments": args.side_envs,
    }
    for item in args.template:
        backend, source = item.split("=", 1)
        load = os.getloadavg()
        results[backend] = run(backend, source, sides, args)
        results[backend]["load average at start"] = [round(x, 2) for x in load]
    text = json.dumps(results, indent=2)
    if args.out:
        args.out.write_text(text)
    print(text)
