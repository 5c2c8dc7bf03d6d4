"""People's rights benchmark: erase and export everything about one person in a large database.

    python -m bench.rights --memories 1000000 --about 100000 --backend sqlite --backend postgresql

For each backend: load `--memories` memories in bulk (SQL in one transaction, not the HTTP API),
the last `--about` of them about one person, start `mnemos serve` (one process, no embedder),
then measure:

- the list latency of other callers (another agent's newest-first page) with `--clients`
  clients, before and during the erasure;
- the export of everything about the person (`GET /api/v1/me/memories/export`): memories per
  second, first alone (nobody else asks the server), then while the other callers list, with
  the server's resident memory before and at its peak;
- the erasure (`POST /api/v1/me/memories/erase`): its request time on loopback (the server's
  time plus a millisecond), and that nothing about the person is left (rows and search hits);
- others' p50 list latency during the export and during the erasure against normal, in the same
  run (the ratios are the readable figures on a shared machine).

Writes `bench/results/2026-12-02/rights/<backend>-<memories>.json` and prints a Markdown table.
Loopback only; every loop is bounded.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from bench.dataset import vocabulary
from bench.run import Rss, database, keep_template, percentile, settle, start_server
from mnemos.config import Settings
from mnemos.domain import accounts
from mnemos.domain.history import SERVER
from mnemos.domain.ids import uuid7
from mnemos.domain.models import HistoryEvent, Memory, MemoryType, Scope, Segment, Status, System
from mnemos.domain.queries import ALL_STATUSES, Audience, MemoryQuery
from mnemos.domain.search import parse_search
from mnemos.storage import migrate, open_store
from mnemos.storage.history_rows import history_row
from mnemos.storage.rows import memory_values
from mnemos.storage.schema import memories, memory_history
from mnemos.storage.sql import SqlStore
from mnemos.storage.transfer_bulk import bulk_load as indexes_aside

RESULTS = Path(__file__).parent / "results" / "2026-12-02" / "rights"
WORD = "quokkabanana"
BATCH = 5_000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Loaded:
    person_key: str
    person_id: uuid.UUID
    lister_key: str  # another person's agent, listing its own memories during the runs


def bulk_load(store: SqlStore, count: int, about: int, seed: int = 1) -> Loaded:
    """`count` memories in one transaction through SQL (no HTTP, no per-memory store call): on
    indexes, foreign keys and the index triggers set aside as `mnemos import` does, each with
    its `created` history row. `about` of them, the last ones stored, are about one person
    (every status), stored by one agent; the others are spread over 100 agents of 10
    organizations, with 8-40 words from the bench's Zipf vocabulary."""
    rng = random.Random(seed)
    words = vocabulary(rng)
    # Cumulative weights once: `choices` would sum 5,000 weights for every memory.
    cumulative = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(words))))
    orgs = [accounts.create_organization(store, f"Bench org {i}") for i in range(10)]
    people = [
        accounts.create_user(store, f"P{i}", f"p{i}-{uuid.uuid4().hex[:6]}@b.test", orgs[i % 10].id)
        for i in range(40)
    ]
    agents = [
        accounts.create_agent(store, people[i % 40].user.id, f"A{i}", None) for i in range(100)
    ]
    person = people[0]
    statuses = (Status.ACTIVE, Status.ACTIVE, Status.ACTIVE, Status.SUPERSEDED, Status.ARCHIVED)
    start = datetime.now(UTC) - timedelta(days=400)
    step = timedelta(days=400) / max(count, 1)

    def memory(i: int) -> Memory:
        mine = i >= count - about
        index = 0 if mine else rng.randrange(1, 100)
        scope = Scope.SUBJECT if mine else (Scope.AGENT, Scope.SUBJECT, Scope.ORGANIZATION)[i % 3]
        text = rng.choices(words, cum_weights=cumulative, k=rng.randint(8, 40))
        if mine:
            text[0] = WORD
        subject = person.user.id if mine else None
        if scope is Scope.SUBJECT and not mine:
            subject = people[rng.randrange(1, 40)].user.id
        at = start + step * i
        return Memory(
            uuid7(int(at.timestamp() * 1000)), " ".join(text), "bench", System.LONG_TERM,
            MemoryType.SEMANTIC, Segment.USER, scope, subject,
            None if scope is Scope.AGENT else orgs[(index % 40) % 10].id,
            agents[index].agent.id, None, {"n": i}, statuses[i % 5] if mine else Status.ACTIVE,
            at, at, orgs[(index % 40) % 10].id,
        )  # fmt: skip

    began = time.monotonic()
    with store._write() as conn:
        if conn.dialect.name == "postgresql":  # rebuilding 1M rows' indexes outlasts 15 s
            conn.exec_driver_sql("SET LOCAL statement_timeout = 0")
        with indexes_aside(conn, ["memories", "memory_history"]):
            for at in range(0, count, BATCH):
                batch = [memory(i) for i in range(at, min(count, at + BATCH))]
                rows = [memory_values(m) for m in batch]
                conn.execute(memories.insert(), rows)
                store._note_subjects(conn, rows)
                created = HistoryEvent.CREATED
                conn.execute(
                    memory_history.insert(),
                    [
                        history_row(m.tenant_id, m.id, m.subject_id, created, SERVER, m.inserted_at)
                        for m in batch
                    ],
                )
                done = at + len(batch)
                rate = done / max(time.monotonic() - began, 1e-6)
                print(f"\r  loading {done:,}/{count:,} ({rate:,.0f}/s)", end="", file=sys.stderr)
    print(file=sys.stderr)
    return Loaded(person.api_key, person.user.id, agents[1].api_key)


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
    # The export alone first (the figure: nobody else asks the server meanwhile), then
    # again while others list (their latency beside it).
    alone_lines, alone_seconds, alone_first = stream_export(base, keys["person"])
    assert alone_lines == about, (alone_lines, about)
    time.sleep(0.5)
    lister = Lister(base, keys["other_agent"], clients)
    time.sleep(baseline_seconds)
    now = time.perf_counter()
    normal = lister.between(now - baseline_seconds + 0.5, now)

    # export, while others list
    idle_rss = rss.peak
    rss.peak = 0
    started = time.perf_counter()
    lines, export_seconds, first_byte = stream_export(base, keys["person"])
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
        "export_alone": {
            "memories": alone_lines,
            "seconds": round(alone_seconds, 3),
            "memories_per_second": round(alone_lines / alone_seconds),
            "first_byte_ms": round(alone_first * 1000, 1),
        },
        "export": {
            "memories": lines,
            "seconds": round(export_seconds, 3),
            "memories_per_second": round(lines / export_seconds),
            "first_byte_ms": round(first_byte * 1000, 1),
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
        "list_p50_ratio_during_erase": _ratio(during_erase, normal),
        "list_p50_ratio_during_export": _ratio(during_export, normal),
    }


def stream_export(base: str, key: str) -> tuple[int, float, float]:
    """The person's export through HTTP, counted by its lines: lines, seconds, first byte's
    seconds. The client does no more than count (its CPU is on the server's machine)."""
    started = time.perf_counter()
    lines = 0
    first_byte = 0.0
    with httpx.stream(
        "GET", f"{base}/api/v1/me/memories/export", headers={"X-API-Key": key}, timeout=600
    ) as answer:
        assert answer.status_code == 200, answer.read()
        for chunk in answer.iter_bytes():
            first_byte = first_byte or time.perf_counter() - started
            lines += chunk.count(b"\n")
    return lines, time.perf_counter() - started, first_byte


def _ratio(during: list[float], normal: list[float]) -> float | None:
    if not during or not normal:
        return None
    return round(percentile(during, 0.5) / percentile(normal, 0.5), 2)


def keys_file(template: str) -> Path:
    """Where a template's keys are kept (a database keeps only their hashes)."""
    return Path(tempfile.gettempdir()) / f"mnemos-rights-{Path(template).name}.keys.json"


def load_or_copy(
    backend: str, count: int, about: int, tmp: Path, template: str | None, keep: str | None = None
) -> tuple[str, Callable[[], None], Loaded, float]:
    """A database for one run: a copy of `template` (loaded earlier, with `keep`), or a fresh
    load of `count` memories; its URL, how to drop it, its keys, and the load's seconds. A
    template is migrated to the current schema after it is copied."""
    url, drop = database(backend, tmp, template)
    try:
        settings = Settings(database_url=url, embedder="none")
        migrate(settings)
        if template:
            fields = json.loads(keys_file(template).read_text())
            loaded = Loaded(
                fields["person_key"], uuid.UUID(fields["person_id"]), fields["lister_key"]
            )
            return url, drop, loaded, 0.0
        store = open_store(settings)
        assert isinstance(store, SqlStore)
        began = time.monotonic()
        loaded = bulk_load(store, count, about)
        load_seconds = time.monotonic() - began
        settle(store)
        store.close()
        if keep:
            keep_template(backend, url, keep)
            fields = {**vars(loaded), "person_id": str(loaded.person_id)}
            keys_file(keep).write_text(json.dumps(fields))
        return url, drop, loaded, load_seconds
    except BaseException:
        drop()
        raise


def run_backend(
    backend: str, count: int, about: int, clients: int, baseline: float,
    template: str | None = None, keep: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-bench-rights-"))
    try:
        url, drop, loaded, load_seconds = load_or_copy(backend, count, about, tmp, template, keep)
        try:
            store = open_store(Settings(database_url=url, embedder="none"))
            assert isinstance(store, SqlStore)
            port = free_port()
            server = start_server(url, port, workers=1)
            try:
                keys = {"person": loaded.person_key, "other_agent": loaded.lister_key}
                result = measure(
                    f"http://127.0.0.1:{port}",
                    store,
                    server.pid,
                    keys,
                    loaded.person_id,
                    about,
                    clients,
                    baseline,
                )
            finally:
                server.terminate()
                server.wait(timeout=60)
            store.close()
        finally:
            drop()
        return {
            "backend": backend,
            "memories": count,
            "template": template,
            "load_seconds": round(load_seconds, 1),
            "workers": 1,
            **result,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def markdown(run: dict[str, Any]) -> str:
    e, x, a = run["erase"], run["export"], run["export_alone"]
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
            f"| others' list p50 / p95, during erasure | {de['p50_ms']} / {de['p95_ms']} ms ({de['requests']} requests; p50 {run['list_p50_ratio_during_erase']}x normal) |",  # noqa: E501
            f"| export {a['memories']:,} memories, alone | {a['seconds']:.2f} s, {a['memories_per_second']:,}/s |",  # noqa: E501
            f"| export {x['memories']:,} memories, while others list | {x['seconds']:.2f} s, {x['memories_per_second']:,}/s |",  # noqa: E501
            f"| server RSS idle / peak during export | {x['server_rss_idle_mib']} / {x['server_rss_peak_during_export_mib']} MiB |",  # noqa: E501
            f"| others' list p50 / p95, during export | {dx['p50_ms']} / {dx['p95_ms']} ms |",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--memories", type=int, default=1_000_000, help="memories in all, --about included"
    )
    parser.add_argument("--about", type=int, default=100_000, help="memories about one person")
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgresql"])
    parser.add_argument("--clients", type=int, default=2, help="other callers listing")
    parser.add_argument("--baseline-seconds", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--template", action="append", default=[], metavar="BACKEND=DATABASE",
        help="copy this database (a SQLite file, or a PostgreSQL database on the bench server) "
        "that a `--keep-template` run loaded with the same --memories and --about",
    )  # fmt: skip
    parser.add_argument(
        "--keep-template", action="append", default=[], metavar="BACKEND=DATABASE",
        help="save the database once loaded as a later run's --template (a 1,000,000-memory "
        "load takes minutes, a copy seconds)",
    )  # fmt: skip
    args = parser.parse_args()
    templates = dict(item.split("=", 1) for item in args.template)
    keeps = dict(item.split("=", 1) for item in args.keep_template)
    # No embedding worker in the server: it would embed the whole data set during the runs.
    os.environ["MNEMOS_EMBEDDER"] = "none"
    args.out.mkdir(parents=True, exist_ok=True)
    for backend in args.backend or ["sqlite", "postgresql"]:
        run = run_backend(
            backend, args.memories, args.about, args.clients, args.baseline_seconds,
            templates.get(backend), keeps.get(backend),
        )  # fmt: skip
        name = f"{backend}-{run['memories']}.json"
        (args.out / name).write_text(json.dumps(run, indent=2) + "\n")
        print(markdown(run), file=sys.stdout)  # noqa: T201
        print(file=sys.stdout)  # noqa: T201


if __name__ == "__main__":
    main()
