"""Migration 0018: every memory-side row gets its tenant from what it already holds, and the
keys lead with it (PostgreSQL) or gain unique indexes with it (SQLite); down and up again."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command

from mnemos.config import Settings
from mnemos.domain.ids import utcnow, uuid7
from mnemos.domain.tenants import UNKNOWN
from mnemos.storage import alembic_config, migrate
from mnemos.storage.postgres import driver_url
from mnemos.storage.schema import (
    agents,
    erasures,
    idempotency_keys,
    memories,
    memory_history,
    organizations,
    subject_tenants,
    users,
)
from tests.conftest import BACKENDS
from tests.test_migration_tuya import _without_tenant, fresh_database

BEFORE = "0017_search_owner"
MEMORY_SIDE = ("memories", "memory_history", "idempotency_keys", "erasures")


def _memory(**fields: Any) -> dict[str, Any]:
    now = utcnow()
    return {
        "id": uuid7(),
        "content": "c",
        "search_text": "c",
        "thought": None,
        "system": "long_term",
        "type": "semantic",
        "segment": "user",
        "scope": "agent",
        "subject_id": None,
        "organization_id": None,
        "source_agent_id": None,
        "chat_room_id": None,
        "metadata": {},
        "status": "active",
        "inserted_at": now,
        "updated_at": now,
        **fields,
    }


@pytest.mark.parametrize("backend", BACKENDS)
def test_0018_fills_every_tenant_and_goes_down_and_up(backend: str, tmp_path: Path) -> None:
    with fresh_database(backend, tmp_path) as url:
        migrate(Settings(database_url=url), BEFORE)
        now = utcnow()
        org, member, loner, subject = uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
        member_bot, loner_bot = uuid.uuid4(), uuid.uuid4()
        shared = _memory(scope="organization", organization_id=org, source_agent_id=member_bot)
        private = _memory(source_agent_id=member_bot)  # agent scope: no organization
        about = _memory(scope="subject", subject_id=subject, source_agent_id=loner_bot)
        orphan = _memory(source_agent_id=uuid.uuid4())  # its agent is gone
        engine = sa.create_engine(driver_url(url))
        with engine.begin() as conn:
            conn.execute(organizations.insert().values(id=org, name="O", inserted_at=now))
            for person, its_org in ((member, org), (loner, None)):
                conn.execute(
                    users.insert().values(
                        id=person,
                        name="P",
                        email=f"{person}@x",
                        handle=str(person),
                        organization_id=its_org,
                        inserted_at=now,
                        updated_at=now,
                    )
                )
            for bot, owner in ((member_bot, member), (loner_bot, loner)):
                conn.execute(
                    agents.insert().values(
                        id=bot,
                        name="B",
                        owner_id=owner,
                        handle=str(bot),
                        inserted_at=now,
                        updated_at=now,
                    )
                )
            conn.execute(_without_tenant(memories).insert(), [shared, private, about, orphan])
            gone = uuid.uuid4()
            history = [
                {"memory_id": m["id"], "subject_id": m["subject_id"]}
                for m in (shared, private, about)
            ] + [{"memory_id": gone, "subject_id": subject}]  # a memory deleted earlier
            conn.execute(
                _without_tenant(memory_history).insert(),
                [{**h, "event": "created", "actor_type": "server", "at": now} for h in history],
            )
            conn.execute(
                _without_tenant(idempotency_keys)
                .insert()
                .values(
                    principal_id=member_bot,
                    key="k",
                    fingerprint="f",
                    memory_id=private["id"],
                    inserted_at=now,
                )
            )
            conn.execute(
                _without_tenant(erasures)
                .insert()
                .values(id=uuid.uuid4(), subject_id=loner, actor_type="operator", erased=0, at=now)
            )
        migrate(Settings(database_url=url))
        with engine.connect() as conn:
            tenant_of = dict(conn.execute(sa.select(memories.c.id, memories.c.tenant_id)).all())
            histories = dict(
                conn.execute(
                    sa.select(memory_history.c.memory_id, memory_history.c.tenant_id)
                ).all()
            )
            key_tenant = conn.execute(sa.select(idempotency_keys.c.tenant_id)).scalar_one()
            erasure_tenant = conn.execute(sa.select(erasures.c.tenant_id)).scalar_one()
            pairs = set(conn.execute(sa.select(subject_tenants)).all())
        assert tenant_of == {
            shared["id"]: org,  # its organization
            private["id"]: org,  # the agent's owner's organization
            about["id"]: loner,  # an owner without organization is their own tenant
            orphan["id"]: UNKNOWN,
        }
        assert histories == {
            shared["id"]: org,
            private["id"]: org,
            about["id"]: loner,
            gone: UNKNOWN,  # no memory left to name it
        }
        assert key_tenant == org and erasure_tenant == loner
        assert pairs == {(subject, loner), (subject, UNKNOWN)}
        with pytest.raises(sa.exc.IntegrityError):  # a memory must name its tenant
            with engine.begin() as conn:
                conn.execute(_without_tenant(memories).insert(), [_memory()])
        command.downgrade(alembic_config(url), BEFORE)
        with engine.connect() as conn:
            for table in MEMORY_SIDE:
                names = {c["name"] for c in sa.inspect(conn).get_columns(table)}
                assert "tenant_id" not in names, table
            assert conn.execute(sa.select(sa.func.count()).select_from(memories)).scalar() == 4
        migrate(Settings(database_url=url))
        engine.dispose()
