"""Migration 0006: existing Tuya memories get their slot, and a key's extra active values are
superseded (newest wins) so the unique index of active slots can be built."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command

from mnemos.config import Settings
from mnemos.domain.ids import utcnow, uuid7
from mnemos.domain.models import Memory, MemoryType, Scope, Segment, Status, System
from mnemos.storage import alembic_config, migrate
from mnemos.storage.postgres import driver_url
from mnemos.storage.rows import memory_values
from mnemos.storage.schema import memories
from tests.conftest import BACKENDS
from tests.live.conftest import _database_for


def _without_tenant(table: sa.Table) -> sa.Table:
    """`table` as it was before migration 0018 (no `tenant_id`), to write rows before it."""
    columns = [sa.Column(c.name, c.type) for c in table.c if c.name != "tenant_id"]
    return sa.Table(table.name, sa.MetaData(), *columns)


@contextmanager
def fresh_database(backend: str, tmp: Path) -> Iterator[str]:
    urls = _database_for(backend, tmp)
    try:
        yield next(urls)
    finally:
        urls.close()


def tuya_memory(subject: uuid.UUID, key: str, scope: int, age: int, agent: Any = None) -> Memory:
    at = utcnow() - timedelta(minutes=age)
    return Memory(
        id=uuid7(),
        content=f"{key}@{age}",
        thought=None,
        system=System.LONG_TERM,
        type=MemoryType.SEMANTIC,
        segment=Segment.USER,
        scope=Scope.AGENT if scope == 3 else Scope.SUBJECT,
        subject_id=subject,
        organization_id=None if scope == 3 else uuid.uuid4(),
        source_agent_id=agent,
        chat_room_id=None,
        metadata={"tuya": {"memory_key": key, "effective_scope": scope, "slot": f"{scope}:{key}"}},
        status=Status.ACTIVE,
        inserted_at=at,
        updated_at=at,
        tenant_id=uuid.uuid4(),
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_0006_backfills_slots_and_keeps_the_newest_active_value(
    backend: str, tmp_path: Path
) -> None:
    with fresh_database(backend, tmp_path) as url:
        migrate(Settings(database_url=url), "0005")
        subject, agent = uuid.uuid4(), uuid.uuid4()
        rows = [
            tuya_memory(subject, "age", 1, age=3),
            tuya_memory(subject, "age", 1, age=1),  # the newest: stays active
            tuya_memory(subject, "age", 1, age=2),
            tuya_memory(subject, "likes", 3, age=1, agent=agent),
        ]
        engine = sa.create_engine(driver_url(url))
        with engine.begin() as conn:
            before_tenants = [
                {name: value for name, value in memory_values(m).items() if name != "tenant_id"}
                for m in rows
            ]
            conn.execute(_without_tenant(memories).insert(), before_tenants)
        migrate(Settings(database_url=url))
        with engine.connect() as conn:
            got = {
                row.content: (row.status, row.tuya_slot)
                for row in conn.execute(
                    sa.select(memories.c.content, memories.c.status, memories.c.tuya_slot)
                )
            }
        assert got == {
            "age@3": ("superseded", "1:age"),
            "age@1": ("active", "1:age"),
            "age@2": ("superseded", "1:age"),
            "likes@1": ("active", f"3:{agent}:likes"),
        }
        command.downgrade(alembic_config(url), "0005")
        engine.dispose()
