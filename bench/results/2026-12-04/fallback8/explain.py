"""EXPLAIN ANALYZE of the hybrid keyword leg's ranking statements (pool 500, limit 100), on a
copy of a PostgreSQL template: `PYTHONPATH=$PWD/src:$PWD python explain.py TEMPLATE OUT [POOL]`."""

import sys
from typing import Any

import sqlalchemy as sa
from bench import vectors
from bench.keyword_leg import captured
from fastapi.testclient import TestClient

from mnemos.api.app import create_app

ROWS = {
    f"{word} {where}": {"query": word, **scope}
    for word in ("harbor", "marigold", "zebrafinch")
    for where, scope in (("one agent", {}), ("org-wide", {"memory_scope": "org"}))
}


def main(template: str, path: str, pool: int) -> None:
    seen: list[tuple[str, Any]] = []

    def spy(*args: Any) -> None:
        statement, parameters = args[2], args[3]
        if "ts_rank" in statement:
            seen.append((statement, parameters))

    with (
        open(path, "w") as out,
        vectors.copied("postgresql", template, vectors=False) as (settings, store, data),
        TestClient(create_app(settings, store, None)) as client,
    ):
        engine = store._search_engine  # type: ignore[attr-defined]
        for label, params in ROWS.items():
            query = captured(client, store, data.big_agent_key, params)
            seen.clear()
            sa.event.listen(engine, "before_cursor_execute", spy)
            for _ in range(3):
                store.rank_memories(query, limit=100, pool=pool)
            sa.event.remove(engine, "before_cursor_execute", spy)
            statement, parameters = seen[-1]
            with engine.connect() as conn, conn.connection.driver_connection.cursor() as cur:
                cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters)
                plan = "\n".join(row[0] for row in cur.fetchall())
            per_search = len(seen) // 3
            print(f"=== {label} ({per_search} statements per search)", file=out)
            print(f"{statement}\n{parameters}\n{plan}\n", file=out, flush=True)
            print(label, plan.splitlines()[-1], file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 500)
