"""One agent of N private memories deleted by `accounts.delete_owned_agent`, under cProfile.

PYTHONPATH=<tree>/src:<tree> python bench/results/2026-12-05d/fixacct/delete_profile.py URL N
"""

import cProfile
import pstats
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

from tests.world import World, agent_memory

from mnemos.config import Settings
from mnemos.domain import accounts
from mnemos.storage import migrate, open_store


def main(url: str, count: int) -> None:
    settings = Settings(database_url=url, rate_limit_per_minute=0, embedder="none")
    migrate(settings)
    store = open_store(settings)
    world = World(store)
    tag = str(time.time_ns())
    ann = world.user(f"Ann{tag}", f"o{tag}")
    bot = world.agent(ann)
    start = datetime.now(UTC) - timedelta(days=1)
    for first in range(0, count, 5000):
        rows = [
            agent_memory(
                bot, f"private note {i}", start + timedelta(milliseconds=i), id=uuid.uuid4()
            )
            for i in range(first, min(count, first + 5000))
        ]
        store.replace_memories(bot.tenant, rows, [], datetime.now(UTC))
    if "postgres" in url:
        with store._write() as conn:  # type: ignore[attr-defined]
            conn.exec_driver_sql("ANALYZE memories")
    profile = cProfile.Profile()
    began = time.perf_counter()
    profile.enable()
    accounts.delete_owned_agent(store, uuid.UUID(ann.id), uuid.UUID(bot.id))
    profile.disable()
    print("took", time.perf_counter() - began)
    pstats.Stats(profile).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
