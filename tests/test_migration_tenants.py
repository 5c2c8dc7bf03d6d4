"""Migration 0018: every memory-side row gets its tenant from what it already holds, and the
keys lead with it (PostgreSQL) or gain unique indexes with it (SQLite); down and up again.
Migration 0019: the vector tables too, their search layout rebuilt per tenant."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from alembic import command

from mnemos.config import Settings
from mnemos.domain.ids import utcnow, uuid7
from mnemos.domain.models import Scope
from mnemos.domain.tenants import UNKNOWN
from mnemos.storage import alembic_config, migrate, open_store
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
from mnemos.storage.sql_vectors import CHUNK_ROWS
from tests.conftest import BACKENDS
from tests.test_migration_tuya import _without_tenant, fresh_database
from tests.test_vector_search import DIMS, MODEL, agent_query, unit
from tests.world import World, agent_memory

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


def _layout(engine: sa.Engine) -> dict[str, set[int]]:
    """Each owner key's memory keys, over its chunks and tail (every tenant together)."""
    held: dict[str, set[int]] = {}
    with engine.connect() as conn:
        for owner, blob in conn.execute(sa.text("SELECT owner, pks FROM vector_chunks")):
            held.setdefault(owner, set()).update(np.frombuffer(bytes(blob), "<i8").tolist())
        for owner, pk in conn.execute(sa.text("SELECT owner, memory_pk FROM vector_tail")):
            held.setdefault(owner, set()).add(pk)
    return held


def _chunk_tenants(engine: sa.Engine) -> list[set[Any]]:
    """The tenants of each sealed chunk's memories."""
    with engine.connect() as conn:
        tenant_of = dict(conn.execute(sa.select(memories.c.pk, memories.c.tenant_id)).all())
        blobs = conn.execute(sa.text("SELECT pks FROM vector_chunks")).scalars().all()
    return [{tenant_of[pk] for pk in np.frombuffer(bytes(b), "<i8").tolist()} for b in blobs]


@pytest.mark.parametrize("backend", BACKENDS)
def test_0019_lays_vectors_out_per_tenant_and_goes_down_and_up(
    backend: str, tmp_path: Path
) -> None:
    """Two organizations' agents store subject memories about one person: before 0019 that
    subject's chunks mix both tenants, after it each chunk holds one. Searches answer the
    same from the layout the worker built, the one 0019's downgrade rebuilt without tenants,
    and the one its upgrade rebuilt with them; nothing is embedded again."""
    with fresh_database(backend, tmp_path) as url:
        settings = Settings(database_url=url)
        migrate(settings)
        store = open_store(settings)
        world = World(store)
        sam = world.user("Sam")
        agents_ = [world.agent(world.user(n, org)) for n, org in (("Ann", "acme"), ("Bob", "beta"))]
        rng = np.random.default_rng(19)
        for agent in agents_:
            vectors = unit(rng.standard_normal((CHUNK_ROWS + 60, DIMS)).astype(np.float32))
            made = [
                agent_memory(
                    agent,
                    f"about sam {i}",
                    scope=Scope.SUBJECT,
                    subject_id=uuid.UUID(sam.id),
                    organization_id=uuid.UUID(agent.organization_id),
                )
                for i in range(len(vectors))
            ]
            store.replace_memories(agent.tenant, made, [], made[0].inserted_at)
            ids = [memory.id for memory in made]
            for start in range(0, len(ids), 100):
                store.save_vectors(MODEL, ids[start : start + 100], vectors[start : start + 100])
        probes = unit(rng.standard_normal((4, DIMS)).astype(np.float32))

        def answers() -> list[list[tuple[uuid.UUID, float]]]:
            found = []
            for agent in agents_:
                query = agent_query(store, agent)
                for probe in probes:
                    ranked = store.nearest_memories(query, probe, MODEL, 10)
                    found.append([(r.id, round(r.score, 5)) for r in ranked])
            return found

        before = answers()
        assert all(len(answer) == 10 for answer in before)
        store.close()
        engine = sa.create_engine(driver_url(url))
        worker_layout = _layout(engine)
        assert all(len(tenants) == 1 for tenants in _chunk_tenants(engine))

        config = alembic_config(url)
        command.downgrade(config, "0018_tenants")
        with engine.connect() as conn:
            columns = {c["name"] for c in sa.inspect(conn).get_columns("vector_chunks")}
        assert "tenant_id" not in columns
        old_layout = _layout(engine)
        subject_keys = {owner for owner in old_layout if owner.startswith("ss")}
        assert old_layout == worker_layout  # the same owner keys hold the same memories
        assert subject_keys and any(len(t) == 2 for t in _chunk_tenants(engine))  # mixed

        command.upgrade(config, "head")
        assert _layout(engine) == worker_layout
        assert all(len(tenants) == 1 for tenants in _chunk_tenants(engine))
        with engine.connect() as conn:
            for table in ("memory_vectors", "vector_queue", "vector_tail", "vector_chunks"):
                nulls = f"SELECT count(*) FROM {table} WHERE tenant_id IS NULL"
                assert conn.execute(sa.text(nulls)).scalar() == 0
        engine.dispose()
        store = open_store(settings)
        try:
            assert answers() == before
        finally:
            store.close()
