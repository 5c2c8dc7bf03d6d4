"""What binding a search's candidate keys costs in `_checked` (the visibility check of the
rescored candidates): one placeholder per key (`IN (...)`, SQLAlchemy's expanding parameter)
against one parameter for all of them (PostgreSQL `= ANY(array)`, SQLite `json_each`), on a copy
of a database `bench.run --keep-template` saved, alternating the two in one process.

    python -m bench.check_binds --template postgresql=DATABASE --template sqlite=FILE
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa

from bench import vectors
from mnemos.domain.accounts import hash_key
from mnemos.domain.memories import AgentListParams, MemoryService
from mnemos.domain.queries import Filters
from mnemos.storage.schema import memories
from mnemos.storage.sql import SqlStore


def measure(backend: str, template: str, rounds: int, count: int) -> dict[str, Any]:
    with vectors.copied(backend, template, vectors=False) as (_, store, data):
        big = store.agent_by_key(hash_key(data.big_agent_key))
        assert big is not None
        query = MemoryService.agent_query(big, AgentListParams(memory_scope="org"), Filters())
        one, params = store._checked(query, with_ids=False)
        plain = SqlStore._candidates_in  # the generic IN (...), one placeholder a key
        store._statements.clear()
        store._candidates_in = plain.__get__(store)  # type: ignore[method-assign]
        expanding, _ = store._checked(query, with_ids=False)
        with store._read() as conn:
            pool = list(conn.execute(sa.select(memories.c.pk)).scalars())
        rng = np.random.default_rng(1)
        spent: dict[str, list[float]] = {"IN (one placeholder a key)": [], "one parameter": []}
        for _ in range(rounds):
            keys = [int(k) for k in rng.choice(pool, count, replace=False)]
            for name, statement in (
                ("IN (one placeholder a key)", expanding),
                ("one parameter", one),
            ):
                with store._read() as conn:
                    began = time.perf_counter()
                    passed = conn.execute(statement, {**params, "candidates": keys}).all()
                    spent[name].append((time.perf_counter() - began) * 1000)
            assert passed is not None
        return {name: vectors.percentiles(ms, skip=3) for name, ms in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--template", action="append", required=True, metavar="BACKEND=SOURCE")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--candidates", type=int, default=400)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    found = {}
    for item in args.template:
        backend, source = item.split("=", 1)
        found[backend] = measure(backend, source, args.rounds, args.candidates)
        print(backend, found[backend], flush=True)
    if args.out:
        args.out.write_text(json.dumps(found, indent=2))


if __name__ == "__main__":
    main()
