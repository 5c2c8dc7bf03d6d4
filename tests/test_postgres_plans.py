"""PostgreSQL's planner knows that a memory's owner decides its tenant (migration 0020).

Every memory query names its tenant beside the owner it reads (`organization_id = X AND
tenant_id = X`). Without statistics over both columns the planner multiplies their
selectivities, expects a fraction of the rows an owner really has, and picks a bitmap
intersection and a sort over the owner's index walked in order (209 ms instead of 2.7 ms at
1,000,000 memories). Here: the estimate for owner and tenant together is the estimate for the
owner alone.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from mnemos.config import Settings
from mnemos.storage import open_store
from mnemos.storage.postgres import driver_url
from tests.conftest import BACKENDS

pytestmark = pytest.mark.skipif("postgresql" not in BACKENDS, reason="PostgreSQL only")

TENANTS = 10
ROWS = 20_000
QUEUED = """
    INSERT INTO memories (id, content, search_text, system, type, segment, scope,
        metadata, status, inserted_at, updated_at, tenant_id)
    SELECT gen_random_uuid(), 'm', 'm', 'long_term', 'semantic', 'user', 'agent',
        '{}', 'active', now(), now(), %(tenant)s
    FROM generate_series(1, %(rows)s)
"""
"""`rows` memories of `tenant`, each queued for the embedding worker (by the table's trigger)."""


@pytest.fixture
def postgres(database_url: str) -> str:
    if not database_url.startswith("postgresql"):
        pytest.skip("PostgreSQL only")
    return database_url


def _rows(conn: sa.Connection, sql: str, params: dict[str, object]) -> float:
    plan = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + sql, params).scalar_one()
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return float(plan[0]["Plan"]["Plan Rows"])


def test_owner_and_tenant_are_estimated_as_the_owner(postgres: str) -> None:
    tenants = [uuid.uuid4() for _ in range(TENANTS)]
    engine = sa.create_engine(driver_url(postgres))
    try:
        with engine.begin() as conn:
            # Each tenant: a third of its rows its organization's, the rest its agents' (an
            # agent each), as in a deployment: the owner always implies the tenant.
            conn.exec_driver_sql(
                """
                INSERT INTO memories (id, content, search_text, system, type, segment, scope,
                    organization_id, source_agent_id, metadata, status, inserted_at,
                    updated_at, tenant_id)
                SELECT gen_random_uuid(), 'm', 'm', 'long_term', 'semantic', 'user',
                    CASE WHEN mod(i, 3) = 0 THEN 'organization' ELSE 'agent' END,
                    CASE WHEN mod(i, 3) = 0 THEN t.id END,
                    CASE WHEN mod(i, 3) = 0 THEN NULL ELSE t.agent END,
                    '{}', 'active', now(), now(), t.id
                FROM generate_series(1, %(rows)s) AS i
                JOIN (SELECT id, agent, row_number() OVER () - 1 AS n
                      FROM unnest(%(tenants)s::uuid[], %(agents)s::uuid[]) AS u(id, agent)) t
                  ON t.n = mod(i, %(count)s)
                """,
                {
                    "rows": ROWS,
                    "tenants": [str(t) for t in tenants],
                    "agents": [str(uuid.uuid4()) for _ in tenants],
                    "count": TENANTS,
                },
            )
            conn.exec_driver_sql("ANALYZE memories")
            tenant = {"t": str(tenants[0])}
            alone = _rows(conn, "SELECT 1 FROM memories WHERE organization_id = %(t)s", tenant)
            both = _rows(
                conn,
                "SELECT 1 FROM memories WHERE organization_id = %(t)s AND tenant_id = %(t)s",
                tenant,
            )
            real = conn.exec_driver_sql(
                "SELECT count(*) FROM memories WHERE organization_id = %(t)s", tenant
            ).scalar_one()
    finally:
        engine.dispose()
    assert real == pytest.approx(ROWS / TENANTS / 3, rel=0.05)
    # Multiplied selectivities would give a tenth (one tenant in ten) of the owner's estimate.
    assert both >= alone * 0.8, (both, alone, real)
    assert both >= real * 0.5, (both, real)


def test_the_embedding_worker_s_claim_walks_the_queue_s_index(postgres: str) -> None:
    """The claim reads the newest queued memories through `ix_vector_queue_order` (migration
    0022), never the whole queue and a sort (15-18 ms a batch at 100,000 queued)."""
    engine = sa.create_engine(driver_url(postgres))
    tenant = uuid.uuid4()
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                """
                INSERT INTO memories (id, content, search_text, system, type, segment, scope,
                    metadata, status, inserted_at, updated_at, tenant_id)
                SELECT gen_random_uuid(), 'm', 'm', 'long_term', 'semantic', 'user', 'agent',
                    '{}', 'active', now(), now(), %(tenant)s
                FROM generate_series(1, %(rows)s)
                """,
                {"tenant": tenant, "rows": ROWS},
            )
            conn.exec_driver_sql("ANALYZE vector_queue")
            plan = conn.exec_driver_sql(
                "EXPLAIN (FORMAT JSON) SELECT tenant_id, memory_pk FROM vector_queue"
                " WHERE claimed_until IS NULL OR claimed_until < now()"
                " ORDER BY memory_pk DESC LIMIT 8"
            ).scalar_one()
            text = json.dumps(plan)
            assert "ix_vector_queue_order" in text
            assert '"Sort"' not in text
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM memories WHERE tenant_id = %(t)s", {"t": tenant})
        engine.dispose()


def test_every_statement_of_the_claim_reads_the_queue_through_an_index(
    postgres: str,
) -> None:
    """Each statement the claim runs on `vector_queue` (the newest, the round over tenants,
    each tenant's newest, the update of the claimed rows) walks an index at 20,000 queued
    memories of one tenant and a few of others: no scan of the queue, no sort of it."""
    store = open_store(Settings(database_url=postgres, embedder="none"))
    engine = sa.create_engine(driver_url(postgres))
    busy, others = uuid.uuid4(), [uuid.uuid4() for _ in range(3)]
    seen: list[tuple[str, Any]] = []

    def note(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "vector_queue" in statement:
            seen.append((statement, parameters))

    try:
        with engine.begin() as conn:
            for tenant, rows in [(busy, ROWS), *((other, 1) for other in others)]:
                conn.exec_driver_sql(QUEUED, {"tenant": tenant, "rows": rows})
            conn.exec_driver_sql("ANALYZE vector_queue")
        sa.event.listen(sa.engine.Engine, "before_cursor_execute", note)
        try:
            claimed = store.claim_unembedded(8, timedelta(seconds=30))
        finally:
            sa.event.remove(sa.engine.Engine, "before_cursor_execute", note)
        assert len(claimed) == 8
        assert len(seen) == 4, [statement for statement, _ in seen]
        with engine.begin() as conn:
            for statement, parameters in seen:
                plan = conn.exec_driver_sql(
                    "EXPLAIN (FORMAT JSON) " + statement, parameters
                ).scalar_one()
                nodes = list(_nodes(plan[0]["Plan"]))
                assert not [n for n in nodes if n["Node Type"] == "Seq Scan"], (statement, plan)
                sorts = [n for n in nodes if n["Node Type"] == "Sort"]
                assert not [n for n in sorts if _reads(n)], (statement, plan)  # of no rows
    finally:
        store.close()
        with engine.begin() as conn:
            for tenant in (busy, *others):
                conn.exec_driver_sql("DELETE FROM memories WHERE tenant_id = %(t)s", {"t": tenant})
        engine.dispose()


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A plan's node and every node below it."""
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def _reads(node: dict[str, Any]) -> bool:
    """Whether a plan node reads a table (somewhere below it)."""
    return any("Relation Name" in below for below in _nodes(node))
