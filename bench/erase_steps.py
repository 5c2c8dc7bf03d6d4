"""What review17's erasure fixes cost on PostgreSQL: one person's erasure of N memories, timed
whole and by step, with `_delete_counted` as before (keys grouped by tenant) and as now (by
tenant and layout owners), alternated on one database.

    python -m bench.erase_steps --url postgresql://root@127.0.0.1/db --memories 100000 --rounds 2

Each round fills N subject memories about a fresh person (ten agents of one organization, no
vectors) and erases them through `Store.erase_subject`. Prints, per side and round, the
erasure's seconds, the DELETE's (`_delete_counted`) and the read of memories stored meanwhile
(`_erase_stored_meanwhile`).
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY

from mnemos.config import Settings
from mnemos.domain import accounts
from mnemos.domain.history import SERVER
from mnemos.domain.ids import uuid7
from mnemos.domain.models import Erasure, Memory, MemoryType, Scope, Segment, Status, System
from mnemos.storage import open_store
from mnemos.storage.postgres import PostgresStore
from mnemos.storage.schema import memories


def grouped_by_tenant(self: PostgresStore, conn: Any, statement: Any) -> Any:  # noqa: ARG001
    """`_delete_counted` before the fix: keys by tenant, no owners."""
    gone = statement.returning(memories.c.tenant_id, memories.c.pk).cte("gone")
    keys = sa.func.array_agg(gone.c.pk, type_=ARRAY(sa.BigInteger()))
    rows = conn.execute(sa.select(gone.c.tenant_id, keys).group_by(gone.c.tenant_id))
    found = {tenant: list(pks) for tenant, pks in rows}
    return sum(len(pks) for pks in found.values()), found, set()


def timed(store: Any, name: str, spent: dict[str, float]) -> None:
    original = getattr(store, name)

    def measured(*args: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - started

    setattr(store, name, measured)


def fill(store: Any, count: int) -> uuid.UUID:
    org = accounts.create_organization(store, f"bench-{uuid.uuid4().hex[:6]}").id
    person = accounts.create_user(store, "P", f"{uuid.uuid4().hex}@x.test", org).user.id
    owner = accounts.create_user(store, "O", f"{uuid.uuid4().hex}@x.test", org).user.id
    bots = [accounts.create_agent(store, owner, f"a{n}", None).agent.id for n in range(10)]
    start = datetime.now(UTC) - timedelta(days=1)
    for first in range(0, count, 10_000):
        rows = [
            Memory(
                id=uuid7(),
                content=f"about P {i}",
                thought=None,
                system=System.LONG_TERM,
                type=MemoryType.SEMANTIC,
                segment=Segment.USER,
                scope=Scope.SUBJECT,
                subject_id=person,
                organization_id=org,
                chat_room_id=None,
                metadata={},
                status=Status.ACTIVE,
                inserted_at=start + timedelta(milliseconds=i),
                updated_at=start,
                tenant_id=org,
                source_agent_id=bots[i % len(bots)],
            )
            for i in range(first, min(first + 10_000, count))
        ]
        store.replace_memories(org, rows, [], datetime.now(UTC))
    return person


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    store = open_store(Settings(database_url=args.url, embedder="none"))
    now_delete = PostgresStore._delete_counted
    sides: dict[str, Callable[..., Any]] = {"before": grouped_by_tenant, "now": now_delete}
    results: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        for side, delete in sides.items():
            person = fill(store, args.memories)
            PostgresStore._delete_counted = delete  # type: ignore[method-assign]
            spent: dict[str, float] = {}
            timed(store, "_delete_counted", spent)
            timed(store, "_erase_stored_meanwhile", spent)
            started = time.perf_counter()
            erased = store.erase_subject(Erasure(uuid7(), person, SERVER, datetime.now(UTC)))
            total = time.perf_counter() - started
            for name in ("_delete_counted", "_erase_stored_meanwhile"):
                delattr(store, name)
            results.append(
                {"round": round_, "side": side, "erased": erased, "seconds": round(total, 3)}
                | {name.strip("_"): round(value, 4) for name, value in spent.items()}
            )
            print(json.dumps(results[-1]), flush=True)  # noqa: T201
    PostgresStore._delete_counted = now_delete  # type: ignore[method-assign]
    store.close()


if __name__ == "__main__":
    main()
