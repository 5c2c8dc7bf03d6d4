"""People's rights benchmark: erase and export everything about one person in a large database.

    python -m bench.rights --memories 1000000 --about 100000 --backend sqlite --backend postgresql

For each backend: load the seeded data set (`bench/dataset.py`, `--memories`), add `--about`
memories about one person, start `mnemos serve` (one process), then measure:

- the list latency of other callers (another agent's newest-first page) with `--clients`
  clients, before and during the erasure;
- the export of everything about the person (`GET /api/v1/me/memories/export`): memories per
  second, and the server's resident memory before and at its peak;
- the erasure (`POST /api/v1/me/memories/erase`): its time, and that nothing about the person is
  left (rows and search hits).

Writes `bench/results/2026-12-01/rights/<backend>.json` and prints a Markdown table.
Loopback only; every loop is bounded.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from bench.dataset import load
from bench.run import Rss, database, percentile, settle, start_server
from mnemos.config import Settings
from mnemos.domain import accounts
from mnemos.domain.ids import uuid7
from mnemos.domain.models import Memory, MemoryType, Scope, Segment, Status, System
from mnemos.domain.queries import ALL_STATUSES, Audience, MemoryQuery
from mnemos.domain.search import parse_search
from mnemos.storage import migrate, open_store
from mnemos.storage.sql import SqlStore

RESULTS = Path(__file__).parent / "results" / "2026-12-01" / "rights"
WORD = "quokkabanana"
BATCH = 5_000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def add_person(
    store: SqlStore, org: uuid.UUID, agent: uuid.UUID, about: int
) -> tuple[str, uuid.UUID]:
    """A person with `about` memories about them (every status), stored by `agent`."""
    issued = accounts.create_user(store, "Subject", f"s-{uuid.uuid4().hex[:8]}@bench.test", org)
    start = datetime.now(UTC) - timedelta(days=300)
    statuses = (Status.ACTIVE, Status.ACTIVE, Status.ACTIVE, Status.SUPERSEDED, Status.ARCHIVED)
    for at in range(0, about, BATCH):
        store.replace_memories(
            [
                Memory(
                    uuid7(),
                    f"{WORD} likes tea number {i} and walks by the harbor",
                    "bench",
                    System.LONG_TERM,
                    MemoryType.SEMANTIC,
                    Segment.USER,
                    Scope.SUBJECT,
                    issued.user.id,
                    org,
                    agent,
                    None,
                    {"n": i},
                    statuses[i % 5],
                    start + timedelta(seconds=i),
                    start + timedelta(seconds=i),
                )  # fmt: skip
                for i in range(at, min(about, at + BATCH))
            ],
            [],
            datetime.now(UTC),
        )
    return issued.api_key, issued.user.id


def left_about(store: SqlStore, person: uuid.UUID) -> tuple[int, int]:
    """(memories about the person, their search hits)."""
    about = (Audience(subject_id=person),)
    rows = store.count_memories(MemoryQuery(audiences=about, statuses=ALL_STATUSES))
    search = parse_search(WORD, 100)
    hits = store.count_memories(MemoryQuery(audiences=about, statuses=ALL_STATUSES, search=search))
    return rows, hits


class Lister:
    """`clients` threads listing another agent's newest page until stopped; each latency is kept
    with its start time, so the ones that started during a window can be picked out."""

    def __init__(self, base: str, key: str, clients: int):
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.errors: list[str] = []
        self.threads = [
            threading.Thread(target=self._run, args=(base, key), daemon=True)
            for _ in range(clients)
        ]
        for thread in self.threads:
            thread.start()

    def _run(self, base: str, key: str) -> None:
        with httpx.Client(base_url=base, timeout=60, headers={"X-API-Key": key}) as http:
            for _ in range(1_000_000):  # bounded
                if self.stop.is_set():
                    return
                started = time.perf_counter()
                answer = http.get("/api/v1/agent/memories", params={"limit": 20})
                took = time.perf_counter() - started
                if answer.status_code != 200:
                    self.errors.append(f"{answer.status_code} {answer.text[:100]}")
                with self.lock:
                    self.samples.append((started, took))

    def between(self, start: float, end: float) -> list[float]:
        with self.lock:
            return [took for began, took in self.samples if start <= began < end]

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()


def latency(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {
        "requests": len(ms),
        "p50_ms": round(percentile(ms, 0.5), 2),
        "p95_ms": round(percentile(ms, 0.95), 2),
    }


def measure(
    base: str,
    store: SqlStore,
    server_pid: int,
    keys: dict[str, str],
    person: uuid.UUID,
    about: int,
    clients: int,
    baseline_seconds: float,
) -> dict[str, Any]:  # noqa: E501
    rss = Rss(server_pid)
    time.sleep(1)
    lister = Lister(base, keys["other_agent"], clients)
    time.sleep(baseline_seconds)
    now = time.perf_counter()
    normal = lister.between(now - baseline_seconds + 0.5, now)

    # export, while others list
    idle_rss = rss.peak
    rss.peak = 0
    started = time.perf_counter()
    lines = 0
    with httpx.stream(
        "GET", f"{base}/api/v1/me/memories/export", headers={"X-API-Key": keys["person"]},
        timeout=600,
    ) as answer:  # fmt: skip
        assert answer.status_code == 200, answer.read()
        first_byte = None
        for chunk in answer.iter_bytes():
            first_byte = first_byte or time.perf_counter() - started
            lines += chunk.count(b"\n")
    export_seconds = time.perf_counter() - started
    export_rss = rss.peak
    during_export = lister.between(started, started + export_seconds)
    assert lines == about, (lines, about)

    # erasure, while others list
    time.sleep(1)
    started = time.perf_counter()
    answer = httpx.post(
        f"{base}/api/v1/me/memories/erase", json={"confirm": True},
        headers={"X-API-Key": keys["person"]}, timeout=600,
    )  # fmt: skip
    erase_seconds = time.perf_counter() - started
    assert answer.status_code == 200, answer.text
    erased = answer.json()["data"]["erased"]
    during_erase = lister.between(started, started + erase_seconds)
    time.sleep(0.5)
    lister.close()
    rss.stop.set()
    if lister.errors:
        raise RuntimeError(f"{len(lister.errors)} failed lists, first: {lister.errors[0]}")
    return {
        "about": about,
        "list_clients": clients,
        "list_normal": latency(normal),
        "export": {
            "memories": lines,
            "seconds": round(export_seconds, 3),
            "memories_per_second": round(lines / export_seconds),
            "first_byte_ms": round((first_byte or 0) * 1000, 1),
            "server_rss_idle_mib": idle_rss,
            "server_rss_peak_during_export_mib": export_rss,
        },
        "list_during_export": latency(during_export),
        "erase": {
            "erased": erased,
            "seconds": round(erase_seconds, 3),
            "left_rows_and_search_hits": left_about(store, person),
        },
        "list_during_erase": latency(during_erase),
    }


def run_backend(
    backend: str, count: int, about: int, clients: int, baseline: float
) -> dict[str, Any]:  # noqa: E501
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-bench-rights-"))
    url, drop = database(backend, tmp)
    try:
        settings = Settings(database_url=url)
        migrate(settings)
        store = open_store(settings)
        assert isinstance(store, SqlStore)
        began = time.monotonic()
        data = load(store, count)
        ctx = store.agent_by_key(accounts.hash_key(data.big_agent_key))
        assert ctx is not None
        person_key, person = add_person(store, data.org_id, ctx.agent.id, about)
        load_seconds = time.monotonic() - began
        settle(store)
        port = free_port()
        server = start_server(url, port, workers=1)
        try:
            keys = {"person": person_key, "other_agent": data.small_agent_key}
            result = measure(
                f"http://127.0.0.1:{port}",
                store,
                server.pid,
                keys,
                person,
                about,
                clients,
                baseline,
            )
        finally:
            server.terminate()
            server.wait(timeout=60)
        store.close()
        return {
            "backend": backend,
            "memories": count + about,
            "load_seconds": round(load_seconds, 1),
            "workers": 1,
            **result,
        }
    finally:
        drop()
        shutil.rmtree(tmp, ignore_errors=True)


def markdown(run: dict[str, Any]) -> str:
    e, x = run["erase"], run["export"]
    n, de, dx = run["list_normal"], run["list_during_erase"], run["list_during_export"]
    return "\n".join(
        [
            f"**{run['backend']}**, {run['memories']:,} memories, {run['about']:,} about one person",
            "",
            "| measure | result |",
            "|---|---|",
            f"| erase {e['erased']:,} memories (request time) | {e['seconds']:.2f} s |",
            f"| left after erasure (rows, search hits) | {tuple(e['left_rows_and_search_hits'])} |",
            f"| others' list p50 / p95, normal | {n['p50_ms']} / {n['p95_ms']} ms |",
            f"| others' list p50 / p95, during erasure | {de['p50_ms']} / {de['p95_ms']} ms ({de['requests']} requests) |",  # noqa: E501
            f"| export {x['memories']:,} memories | {x['seconds']:.2f} s, {x['memories_per_second']:,}/s |",  # noqa: E501
            f"| server RSS idle / peak during export | {x['server_rss_idle_mib']} / {x['server_rss_peak_during_export_mib']} MiB |",  # noqa: E501
            f"| others' list p50 / p95, during export | {dx['p50_ms']} / {dx['p95_ms']} ms |",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=1_000_000, help="the background data set")
    parser.add_argument("--about", type=int, default=100_000, help="memories about one person")
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgresql"])
    parser.add_argument("--clients", type=int, default=2, help="other callers listing")
    parser.add_argument("--baseline-seconds", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for backend in args.backend or ["sqlite", "postgresql"]:
        run = run_backend(backend, args.memories, args.about, args.clients, args.baseline_seconds)
        name = f"{backend}-{run['memories']}.json"
        (args.out / name).write_text(json.dumps(run, indent=2) + "\n")
        print(markdown(run), file=sys.stdout)  # noqa: T201
        print(file=sys.stdout)  # noqa: T201


if __name__ == "__main__":
    main()
