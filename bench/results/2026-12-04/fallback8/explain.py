"""EXPLAIN ANALYZE of the hybrid keyword leg's ranking statements (pool 500, limit 100)."""
import sys, time
import sqlalchemy as sa
from fastapi.testclient import TestClient
from bench import vectors
from bench.keyword_leg import captured
from mnemos.api.app import create_app

ROWS = {
    "harbor one agent": {"query": "harbor"},
    "harbor org-wide": {"query": "harbor", "memory_scope": "org"},
    "marigold one agent": {"query": "marigold"},
    "marigold org-wide": {"query": "marigold", "memory_scope": "org"},
    "zebrafinch one agent": {"query": "zebrafinch"},
    "zebrafinch org-wide": {"query": "zebrafinch", "memory_scope": "org"},
}
out = open(sys.argv[2], "w")
with vectors.copied("postgresql", sys.argv[1], vectors=False) as (settings, store, data):
    with TestClient(create_app(settings, store, None)) as client:
        for label, params in ROWS.items():
            query = captured(client, store, data.big_agent_key, params)
            seen = []
            def spy(conn, cursor, statement, parameters, context, executemany):
                if "ts_rank" in statement:
                    seen.append((statement, parameters))
            sa.event.listen(store._search_engine, "before_cursor_execute", spy)
            for _ in range(3):
                store.rank_memories(query, limit=100, pool=500)
            sa.event.remove(store._search_engine, "before_cursor_execute", spy)
            statement, parameters = seen[-1]
            with store._search_engine.connect() as conn:
                raw = conn.connection.driver_connection
                with raw.cursor() as cur:
                    cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters)
                    plan = "\n".join(r[0] for r in cur.fetchall())
            print(f"=== {label} ({len(seen)//3} statements per search)\n{statement}\n{parameters}\n{plan}\n", file=out, flush=True)
            print(label, plan.splitlines()[-1], file=sys.stderr)
