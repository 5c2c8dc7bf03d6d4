"""The embedding worker's claim between tenants, versions side by side.

    python -m bench.claim_fair --side before=/tmp/old --side after=. \\
        --template sqlite= --template postgresql= --rounds 2 --out FILE

`claims`: per shape (`one`: 100,000 queued memories of one tenant and one each of three others;
`many`: 10,000 tenants with one queued memory each), one fresh database filled by SQL (the
queue's trigger queues each memory); each side in turn (the order reversed every other round)
times `--claims` claims of 8 in a process of its own, with its own code (the claims' leases are
released after each, so every claim meets the same queue), then prints the plan of each
statement its claim ran on `vector_queue` (PostgreSQL: EXPLAIN ANALYZE; SQLite: EXPLAIN QUERY
PLAN).

`fresh`: per side and round, a fresh database and a server (`mnemos serve --workers 1`, the
local embedder); tenant A's process stores `--rate` memories a second straight into the
database (an import: faster than the worker embeds) for as long as the run lasts; tenant B
stores `--probes` memories over HTTP one after the other, each followed by semantic searches for
its words every 20 ms until it is found, `--wait` seconds at most. Reported: B's seconds from
store to found (p50 / p99 / max), how many were not found in time, and A's queue at the end.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import sqlalchemy as sa

from bench import sides as sides_
from bench.run import AGENT, STORE_BODY, bench_port, database
from mnemos.config import Settings
from mnemos.storage import migrate
from mnemos.storage.postgres import driver_url

SHAPES = {"one": [(100_000, False), (1, False), (1, False), (1, False)], "many": [(10_000, True)]}
"""Each shape's queued memories: (rows, each row a tenant of its own) per statement."""

FILL = {
    "postgresql": """
        INSERT INTO memories (id, content, search_text, system, type, segment, scope,
            metadata, status, inserted_at, updated_at, tenant_id)
        SELECT gen_random_uuid(), 'm', 'm', 'long_term', 'semantic', 'user', 'agent',
            '{{}}', 'active', now(), now(), {tenant}
        FROM generate_series(1, :rows)
    """,
    "sqlite": """
        WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < :rows)
        INSERT INTO memories (id, content, search_text, system, type, segment, scope,
            metadata, status, inserted_at, updated_at, tenant_id)
        SELECT lower(hex(randomblob(16))), 'm', 'm', 'long_term', 'semantic', 'user', 'agent',
            '{{}}', 'active', :at, :at, {tenant}
        FROM s
    """,
}
AT = "2026-12-05 00:00:00.000000"  # SQLite's text of a time (PostgreSQL's statement says now())
NEW_TENANT = {"postgresql": "gen_random_uuid()", "sqlite": "lower(hex(randomblob(16)))"}

CLAIMS = """
import json, sys, time
from datetime import timedelta
import sqlalchemy as sa
from mnemos.config import Settings
from mnemos.storage import open_store
url, driver, claims = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = open_store(Settings(database_url=url, embedder="none"))
engine = sa.create_engine(driver)
release = "UPDATE vector_queue SET claimed_until = NULL WHERE claimed_until IS NOT NULL"
spent, sizes = [], []
for i in range(claims + 20):  # the first 20 warm up
    began = time.perf_counter()
    sizes.append(len(store.claim_unembedded(8, timedelta(seconds=30))))
    spent.append((time.perf_counter() - began) * 1000)
    with engine.begin() as conn:
        conn.exec_driver_sql(release)
seen = []
def note(conn, cursor, statement, parameters, *_):
    if "vector_queue" in statement and conn.engine is not engine:
        seen.append((statement, parameters))
sa.event.listen(sa.engine.Engine, "before_cursor_execute", note)
store.claim_unembedded(8, timedelta(seconds=30))
sa.event.remove(sa.engine.Engine, "before_cursor_execute", note)
plans = []
with engine.begin() as conn:
    postgres = conn.dialect.name == "postgresql"
    explain = "EXPLAIN (ANALYZE, BUFFERS) " if postgres else "EXPLAIN QUERY PLAN "
    for statement, parameters in seen:
        rows = conn.exec_driver_sql(explain + statement, parameters).all()
        plan = [row[0] if postgres else row[-1] for row in rows]
        plans.append({"statement": statement, "plan": plan})
    conn.exec_driver_sql(release)
timed = sorted(spent[20:])
print(json.dumps({
    "claim ms": {"p50": round(timed[len(timed) // 2], 3),
                 "p95": round(timed[int(len(timed) * 0.95)], 3), "max": round(timed[-1], 3)},
    "claimed per claim": sorted(set(sizes)), "plans": plans,
}))
"""


def fill(backend: str, url: str, shape: str) -> int:
    """The shape's queued memories, by SQL; how many are queued."""
    engine = sa.create_engine(driver_url(url) if backend == "postgresql" else url)
    try:
        with engine.begin() as conn:
            for rows, own in SHAPES[shape]:
                tenant = NEW_TENANT[backend] if own else f"'{uuid.uuid4().hex}'"
                conn.execute(sa.text(FILL[backend].format(tenant=tenant)), {"rows": rows, "at": AT})
            if backend == "postgresql":
                conn.exec_driver_sql("ANALYZE")
            return int(conn.exec_driver_sql("SELECT count(*) FROM vector_queue").scalar_one())
    finally:
        engine.dispose()


def claims(backend: str, sides: dict[str, Path], args: argparse.Namespace) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for shape in SHAPES:
        tmp = Path(tempfile.mkdtemp(prefix="mnemos-claim-"))
        url, drop = database(backend, tmp)
        try:
            migrate(Settings(database_url=url))
            runs: dict[str, list[Any]] = {name: [] for name in sides}
            found[shape] = {"queued": fill(backend, url, shape), "runs": runs}
            driver = driver_url(url) if backend == "postgresql" else url
            for round_ in range(args.rounds):
                for name in list(sides) if round_ % 2 == 0 else list(sides)[::-1]:
                    result = json.loads(
                        sides_.in_side(sides[name], CLAIMS, url, driver, str(args.claims))
                    )
                    result["load average"] = sides_.load_average()
                    runs[name].append(result)
                    print(backend, shape, name, result["claim ms"], file=sys.stderr, flush=True)
        finally:
            sides_.clean_up(None, drop, tmp)
    return found


PREPARE = """
import json, sys
from mnemos.config import Settings
from mnemos.domain import accounts
from mnemos.storage import migrate, open_store
settings = Settings(database_url=sys.argv[1])
migrate(settings)
store = open_store(settings)
made = {}
for name in ("a", "b"):
    org = accounts.create_organization(store, f"tenant {name}")
    user = accounts.create_user(store, name, f"{name}@example.test", org.id).user
    agent = accounts.create_agent(store, user.id, f"agent {name}", None)
    made[name] = {"key": agent.api_key, "agent": str(agent.agent.id), "tenant": str(org.id)}
print(json.dumps(made))
store.close()
"""

STREAM = """
import os, sys, time, uuid
from mnemos.config import Settings
from mnemos.domain.ids import utcnow, uuid7
from mnemos.domain.models import Memory, MemoryType, Scope, Segment, Status, System
from mnemos.storage import open_store
url, agent, tenant, stop, rate = sys.argv[1:6]
agent, tenant, rate = uuid.UUID(agent), uuid.UUID(tenant), float(rate)
store = open_store(Settings(database_url=url, embedder="none"))
began, i = time.perf_counter(), 0
while not os.path.exists(stop):
    time.sleep(max(0.0, began + i / rate - time.perf_counter()))
    at = utcnow()
    batch = [
        Memory(id=uuid7(), content=f"Invoice reminder {i + n} for accounting {uuid.uuid4().hex}",
               thought=None, system=System.LONG_TERM, type=MemoryType.SEMANTIC,
               segment=Segment.USER, scope=Scope.AGENT, source_agent_id=agent, subject_id=None,
               organization_id=None, chat_room_id=None, metadata={}, status=Status.ACTIVE,
               inserted_at=at, updated_at=at, tenant_id=tenant)
        for n in range(10)
    ]
    store.replace_memories(tenant, batch, [], at)
    i += 10
print(i)
"""


def fresh_side(backend: str, tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-fair-"))
    url, drop = database(backend, tmp)
    server = stream = None
    port = bench_port(8650)
    try:
        made = json.loads(sides_.in_side(tree, PREPARE, url))
        server = sides_.serve(tree, url, port, MNEMOS_EMBEDDER="local")
        a, b = made["a"], made["b"]
        stream = subprocess.Popen(
            [sys.executable, "-c", STREAM, url, a["agent"], a["tenant"], str(tmp / "stop")]
            + [str(args.rate)],
            env=sides_.side_env(tree),
            cwd=tree,
            stdout=subprocess.PIPE,
        )
        time.sleep(5.0)  # the worker's model loaded, A's queue growing
        found: list[float] = []
        late = 0
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": b["key"]}, timeout=60
        ) as http:
            for i in range(args.probes):
                body = json.loads(STORE_BODY.replace("%d %d", f"fresh {i} {uuid.uuid4().hex}"))
                stored = http.post(AGENT, json=body)
                stored.raise_for_status()
                memory_id, began = stored.json()["data"]["id"], time.perf_counter()
                query = {"query": body["memory"]["content"], "mode": "semantic", "limit": 5}
                while time.perf_counter() - began < args.wait:
                    answer = http.get(f"{AGENT}/search", params=query).json()
                    if any(row["id"] == memory_id for row in answer["data"]):
                        found.append(time.perf_counter() - began)
                        break
                    time.sleep(0.02)
                else:
                    late += 1
        queued = sides_.backlog(url, tree)
        (tmp / "stop").touch()
        streamed = int(stream.communicate(timeout=60)[0])
        result: dict[str, Any] = {
            "B's store to found by meaning s": {
                f"p{p}": round(float(np.percentile(found, p)), 3) for p in (50, 99)
            }
            | {"max": round(max(found), 3)}
            if found
            else None,
            f"B's memories not found in {args.wait} s": late,
            "A's memories stored": streamed,
            "queue at the end": queued,
            "load average": sides_.load_average(),
        }
        return result
    finally:
        sides_.clean_up(server, drop, tmp, stream)


def run(
    backend: str, template: str, sides: dict[str, Path], args: argparse.Namespace
) -> dict[str, Any]:
    del template  # every run starts from a fresh database
    result: dict[str, Any] = {}
    if args.claims:
        result["claims"] = claims(backend, sides, args)
    if args.probes:
        runs: dict[str, list[Any]] = {name: [] for name in sides}
        for round_ in range(args.rounds):
            for name in list(sides) if round_ % 2 == 0 else list(sides)[::-1]:
                runs[name].append(fresh_side(backend, sides[name], args))
                print(backend, "fresh", name, runs[name][-1], file=sys.stderr, flush=True)
        result["fresh"] = runs
    return result


if __name__ == "__main__":
    sides_.main(__doc__, run, rounds=2, claims=200, probes=10, wait=20, rate=200)
