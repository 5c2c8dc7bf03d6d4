"""What a store pays for inserting only while its agent exists (review17 finding 5).

    python -m bench.store_agent_check --database sqlite:////tmp/x/m.db --rounds 6 --stores 300
    python -m bench.store_agent_check --database postgresql://.../db --rounds 6 --stores 300

One process, one agent, `Store.insert_memory` called `--stores` times per side and round, the
sides alternated (the order reversed every other round): `plain`, the insert as it was (`INSERT
... VALUES`), and `checked`, the insert today (`INSERT ... SELECT ... WHERE EXISTS (agent FOR KEY
SHARE)`). Prints the median and p90 of each side's per-store milliseconds over all rounds, and
the median of the rounds' medians.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from tests.world import Actor, agent_memory

from mnemos.config import Settings
from mnemos.domain import accounts
from mnemos.storage import migrate, open_store, sql
from mnemos.storage.schema import memories

CHECKED = sql._insert_by_agent


def plain(conn: Connection, row: dict[str, Any]) -> None:
    conn.execute(memories.insert(), row)


SIDES = {"plain": plain, "checked": CHECKED}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database", required=True)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--stores", type=int, default=300)
    args = parser.parse_args()
    settings = Settings(database_url=args.database)
    migrate(settings)
    store = open_store(settings)
    owner = accounts.create_user(store, "Ann", f"ann-{time.time_ns()}@example.test", None).user
    issued = accounts.create_agent(store, owner.id, "Bot", None)
    bot = Actor(str(issued.agent.id), issued.api_key, None, str(owner.id))
    times: dict[str, list[float]] = {name: [] for name in SIDES}
    medians: dict[str, list[float]] = {name: [] for name in SIDES}
    for round_ in range(args.rounds):
        order = list(SIDES) if round_ % 2 == 0 else list(reversed(SIDES))
        for name in order:
            sql._insert_by_agent = SIDES[name]  # type: ignore[assignment]
            taken = []
            for i in range(args.stores):
                memory = agent_memory(bot, f"note {round_} {i} about tea and green things")
                start = time.perf_counter()
                store.insert_memory(memory)
                taken.append((time.perf_counter() - start) * 1000)
            times[name] += taken
            medians[name].append(statistics.median(taken))
    sql._insert_by_agent = CHECKED
    for name in SIDES:
        ordered = sorted(times[name])
        p90 = ordered[int(len(ordered) * 0.9)]
        print(
            f"{name:8} median {statistics.median(ordered):.3f} ms  p90 {p90:.3f} ms  "
            f"round medians {[round(m, 3) for m in medians[name]]}"
        )
    with store._write() as conn:  # type: ignore[attr-defined]
        conn.execute(sa.delete(memories).where(memories.c.source_agent_id == issued.agent.id))
    store.close()


if __name__ == "__main__":
    main()
