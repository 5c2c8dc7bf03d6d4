"""Store latency of ordinary text against text that NFKD multiplies (review18, noticed).

PYTHONPATH=. python bench/results/2026-12-05d/review18/amp.py URL
"""

import statistics
import sys
import time

from fastapi.testclient import TestClient
from tests.world import World, memory_body

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.storage import migrate, open_store

TEXTS = {
    "ascii words": " ".join(f"w{i % 997}" for i in range(1700))[:10000],
    "a a a": "a " * 5000,
    "FDFA x10000": "\ufdfa" * 10000,
}


def main(url: str) -> None:
    settings = Settings(
        database_url=url, rate_limit_per_minute=0, embedder="none", max_in_flight_per_tenant=0
    )
    migrate(settings)
    store = open_store(settings)
    world = World(store)
    tag = str(time.time()).replace(".", "")
    agent = world.agent(world.user(f"Ann{tag}", f"amp-org{tag}"))
    with TestClient(create_app(settings, store)) as client:
        for round_ in range(3):
            for name, text in TEXTS.items():
                took = []
                for _ in range(10):
                    began = time.perf_counter()
                    stored = client.post(
                        "/api/v1/agent/memories", json=memory_body(text), headers=agent.headers
                    )
                    took.append(time.perf_counter() - began)
                    assert stored.status_code == 201, stored.text[:200]
                print(round_, f"{name:12s} median {statistics.median(took) * 1000:.1f} ms")


if __name__ == "__main__":
    main(sys.argv[1])
