"""Writes an agent with N private memories and two other organizations' agents; prints their
keys as JSON for `live_run.py` (review18, finding 1, against a real `mnemos serve`).

PYTHONPATH=. python bench/results/2026-12-05d/review18/live_setup.py URL N > keys.json
"""

import json
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

from tests.world import World, agent_memory

from mnemos.config import Settings
from mnemos.storage import migrate, open_store


def main(url: str, count: int) -> None:
    settings = Settings(database_url=url, embedder="none")
    migrate(settings)
    store = open_store(settings)
    world = World(store)
    tag = str(time.time()).replace(".", "")
    ann = world.user(f"Ann{tag}", f"a{tag}")
    doomed = world.agent(ann)
    other = world.agent(world.user(f"Bob{tag}", f"b{tag}"))
    third = world.agent(world.user(f"Cy{tag}", f"c{tag}"))
    start = datetime.now(UTC) - timedelta(days=1)
    for first in range(0, count, 5000):
        rows = [
            agent_memory(
                doomed, f"private note {i}", start + timedelta(milliseconds=i), id=uuid.uuid4()
            )
            for i in range(first, min(count, first + 5000))
        ]
        store.replace_memories(doomed.tenant, rows, [], datetime.now(UTC))
    store.close()
    keys = {"ann": ann.api_key, "doomed": doomed.id, "other": other.api_key}
    print(json.dumps({**keys, "third": third.api_key}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
