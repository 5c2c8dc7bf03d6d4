"""One person deletes an agent with N private memories; meanwhile another organization's agent
stores one memory and a third organization's agent reads its first page (review18, finding 1).

PYTHONPATH=. python bench/results/2026-12-05d/review18/agentdel2.py URL N
"""

import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient
from tests.world import World, agent_memory, memory_body

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.storage import migrate, open_store

BASE = "/api/v1/agent/memories"


def main(url: str, count: int) -> None:
    settings = Settings(database_url=url, rate_limit_per_minute=0, embedder="none")
    migrate(settings)
    store = open_store(settings)
    world = World(store)
    tag = str(time.time()).replace(".", "")
    ann = world.user(f"Ann{tag}", f"del-org{tag}")
    doomed = world.agent(ann)
    other = world.agent(world.user(f"Bob{tag}", f"other-org{tag}"))
    third = world.agent(world.user(f"Cy{tag}", f"third-org{tag}"))
    start = datetime.now(UTC) - timedelta(days=1)
    for first in range(0, count, 5000):
        rows = [
            agent_memory(
                doomed, f"private note {i}", start + timedelta(milliseconds=i), id=uuid.uuid4()
            )
            for i in range(first, min(count, first + 5000))
        ]
        store.replace_memories(doomed.tenant, rows, [], datetime.now(UTC))
    print("request threads", settings.resolved_worker_threads())
    results: dict[str, tuple[int, float]] = {}

    def timed(name: str, call: object) -> None:
        began = time.perf_counter()
        status = call()  # type: ignore[operator]
        results[name] = (status, round(time.perf_counter() - began, 2))

    with TestClient(create_app(settings, store)) as client:
        client.get(BASE, headers=third.headers)
        began = time.perf_counter()
        client.get(BASE, headers=third.headers)
        print(f"third tenant's read alone {time.perf_counter() - began:.3f} s")
        calls = [
            (
                "delete",
                lambda: (
                    client.delete(f"/api/v1/me/agents/{doomed.id}", headers=ann.headers).status_code
                ),
            ),
            (
                "other store",
                lambda: client.post(BASE, json=memory_body("x"), headers=other.headers).status_code,
            ),
            ("third read", lambda: client.get(BASE, headers=third.headers).status_code),
        ]
        threads = []
        for (name, call), pause in zip(calls, (0.3, 0.1, 0.0), strict=True):
            thread = threading.Thread(target=timed, args=(name, call))
            thread.start()
            threads.append(thread)
            time.sleep(pause)
        for thread in threads:
            thread.join()
    print(count, results)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
