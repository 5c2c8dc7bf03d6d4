"""How the SQL store reads: list SQL cached by query shape, and snapshots."""

from __future__ import annotations

import uuid
from dataclasses import fields
from datetime import UTC, datetime

import pytest

from mnemos.domain.models import Scope, Status, System
from mnemos.domain.pagination import Position
from mnemos.domain.queries import Audience, Filters, MemoryQuery
from mnemos.domain.search import parse_search
from mnemos.storage.base import Store
from mnemos.storage.sql import SqlStore
from mnemos.storage.sql_conditions import AUDIENCE_SQL, FILTER_SQL
from tests.domain.test_rules import memory


def org_query(org: uuid.UUID, **fields: object) -> MemoryQuery:
    audience = Audience(
        organization_id=org, scopes=(Scope.ORGANIZATION, Scope.SUBJECT), tenant_id=org
    )
    return MemoryQuery(audiences=(audience,), **fields)  # type: ignore[arg-type]


def test_same_shape_same_statement_other_values(store: Store) -> None:
    assert isinstance(store, SqlStore)
    first, first_params = store.list_statement(org_query(uuid.uuid4()), limit=21)
    other_org = uuid.uuid4()
    second, second_params = store.list_statement(org_query(other_org), limit=5)
    assert second is first  # built once
    assert second_params["a0_organization_id"] == other_org and second_params["limit"] == 5
    assert first_params["a0_organization_id"] != other_org
    # No value is ever rendered into the cached SQL.
    assert other_org.hex not in str(first) and str(other_org) not in str(first)


def test_each_shape_has_its_own_statement(store: Store) -> None:
    assert isinstance(store, SqlStore)
    org = uuid.uuid4()
    after = Position(inserted_at=datetime.now(UTC), id=uuid.uuid4())
    shapes = [
        org_query(org),
        org_query(org, system=System.LONG_TERM),
        org_query(org, statuses=tuple(Status)),
        org_query(org, search=parse_search("harbor", 500)),
        MemoryQuery(
            audiences=(
                Audience(source_agent_id=org, tenant_id=org),
                Audience(organization_id=org, tenant_id=org),
            )
        ),
    ]
    statements = [store.list_statement(query, limit=21)[0] for query in shapes]
    statements.append(store.list_statement(shapes[0], limit=21, after=after)[0])
    assert len({id(statement) for statement in statements}) == len(statements)


def test_a_snapshot_reads_one_state(store: Store) -> None:
    org = uuid.uuid4()
    query = org_query(org)

    def add() -> None:
        store.insert_memory(memory(Scope.ORGANIZATION, None, org))

    add()
    with store.snapshot():
        before = store.count_memories(query)
        add()  # committed by the writer while the snapshot is open
        assert store.count_memories(query) == before == 1
        assert len(store.list_memories(query, limit=10)) == 1
    assert store.count_memories(query) == 2


def test_postgresql_plans_every_search_with_its_words(store: Store) -> None:
    """Statements psycopg prepares never take the search words as a parameter: a generic plan
    could not tell a common word from a rare one (docs/decisions.md, Performance)."""
    assert isinstance(store, SqlStore)
    if store._read_engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL only")
    org = uuid.uuid4()
    with store.snapshot():
        for term in ["harbor"] * 6 + ["marigold"] * 6:  # psycopg prepares after 5 runs
            store.list_memories(org_query(org, search=parse_search(term, 500)), limit=21)
        with store._read() as conn:
            prepared = [
                row[0]
                for row in conn.exec_driver_sql("SELECT statement FROM pg_prepared_statements")
                if "to_tsquery" in row[0]
            ]
    assert len(prepared) == 2  # one per search text
    assert all("harbor:*" in text or "marigold:*" in text for text in prepared)


def test_every_filter_has_its_sql() -> None:
    """A new field of `Filters` or `Audience` fails here until `storage/sql_conditions.py`
    says how it narrows a list."""
    assert list(FILTER_SQL) == [field.name for field in fields(Filters)]
    assert list(AUDIENCE_SQL) == [field.name for field in fields(Audience)]
