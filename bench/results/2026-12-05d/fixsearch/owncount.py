"""A newest-first search of a word another organization holds more than `DRIVER_POSTINGS`
(30,000) times (review18, finding 2): main's plan (refused before it runs) against the fix's
(the word counted in the caller's own audience, then looked up, or refused), alternated in one
process on one database of 100,000 memories.

Globex's agent: 60,000 memories holding `marigold`. Acme's agent: 40,000 memories, the oldest
`the client likes marigold tea`, then 35,000 holding `harbor` and 5,000 notes (newest), so
`marigold` is rare for Acme (answered by the fix) and `harbor` is common for Acme too (still
refused, after a count of 30,001 entries). Globex also holds `harbor` once per memory.

PYTHONPATH=.:src python bench/results/2026-12-05d/fixsearch/owncount.py URL ROUNDS
"""

import statistics
import sys
import time
from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient
from tests.world import World, agent_memory

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.storage import migrate, open_store, search_plan, sql
from mnemos.storage.search_plan import plan_search

BATCH = 5_000


def fill(store, agent, contents, start):  # noqa: ANN001, ANN201
    for first in range(0, len(contents), BATCH):
        rows = [
            agent_memory(agent, text, start + timedelta(seconds=first + i))
            for i, text in enumerate(contents[first : first + BATCH])
        ]
        store.replace_memories(agent.tenant, rows, [], datetime.now(UTC))


def main(url: str, rounds: int) -> None:
    settings = Settings(database_url=url, rate_limit_per_minute=0, embedder="none")
    migrate(settings)
    store = open_store(settings)
    world = World(store)
    acme = world.agent(world.user("Ann", "Acme"))
    globex = world.agent(world.user("Gus", "Globex"))
    start = datetime.now(UTC) - timedelta(days=3)
    began = time.perf_counter()
    fill(store, globex, [f"marigold harbor shipment {i}" for i in range(60_000)], start)
    acme_texts = ["the client likes marigold tea"]
    acme_texts += [f"harbor crate {i}" for i in range(35_000)]
    acme_texts += [f"note number {i}" for i in range(4_999)]
    fill(store, acme, acme_texts, start + timedelta(days=1))
    with store._write() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("ANALYZE memories")
        else:
            conn.exec_driver_sql("INSERT INTO memories_fts(memories_fts) VALUES ('optimize')")
    print("filled in", round(time.perf_counter() - began, 1), "s")
    fixed = sql.own_plan

    def main_plan(search, stats, limit, count):  # noqa: ANN001, ANN202, ARG001
        return plan_search(search, stats, limit)

    times: dict[tuple[str, str], list[float]] = {}
    answers: dict[tuple[str, str], int] = {}
    with TestClient(create_app(settings, store)) as client:
        for _ in range(rounds):
            for side, plan in (("main", main_plan), ("fix", fixed)):
                sql.own_plan = plan
                for word in ("marigold", "harbor"):
                    t0 = time.perf_counter()
                    answer = client.get(
                        "/api/v1/agent/memories",
                        params={"content_query": word},
                        headers=acme.headers,
                    )
                    times.setdefault((side, word), []).append(time.perf_counter() - t0)
                    answers[(side, word)] = answer.status_code
    assert search_plan.DRIVER_POSTINGS == 30_000
    for key, values in sorted(times.items()):
        values = sorted(values)
        p95 = values[max(0, round(0.95 * len(values)) - 1)]
        print(
            key,
            answers[key],
            f"median {statistics.median(values) * 1000:.1f} ms",
            f"p95 {p95 * 1000:.1f} ms",
        )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
