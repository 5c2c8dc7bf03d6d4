"""A hostile review of durability, upgrades and data fidelity (review23).

Each test states the behaviour the finding asks for and is a strict xfail: it fails today for the
finding's reason (docs/decisions.md, "A hostile review of durability, upgrades and data fidelity
(2026-12-05, helper "review23")").
"""

from __future__ import annotations

import io
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.embedding import load_embedder
from mnemos.embedding.remote import EndpointEmbedder
from mnemos.indexer import drain
from mnemos.storage import alembic_config, migrate, open_store
from mnemos.storage.base import Store
from mnemos.storage.postgres import driver_url
from mnemos.storage.schema import memory_vectors
from mnemos.storage.transfer_import import import_database
from tests.conftest import BACKENDS, POSTGRES_URL
from tests.test_claim_fair import _has_vector
from tests.test_embedding import EmbeddingsServer, good_answer
from tests.test_migration_tuya import fresh_database
from tests.test_recall import AISLE
from tests.test_transfer import AGENT, client_on, dump, fresh
from tests.world import World, agent_memory, memory_body

SEARCH = "/api/v1/agent/memories/search"
WORDS = "aisle seats"  # found by the keyword leg too

WIDENING = "0029_vector_model_text"
WIDENED = ("memory_vectors", "vector_chunks")

LONG_NAME = "hf.co/" + "m" * 193
"""An endpoint's model name of 199 characters: it fits `model VARCHAR(200)` alone, as every
release before 0026 stored it, but not with its size (`@8`) that 0026 and the endpoint add."""


@pytest.fixture
def server() -> Iterator[EmbeddingsServer]:
    running = EmbeddingsServer()
    yield running
    running.close()


# --- 1. a long model name: 0026 stops the upgrade on PostgreSQL; at head no vector is saved -------


def test_an_endpoint_with_a_long_model_name_embeds_on_postgresql(
    store: Store, world: World, server: EmbeddingsServer, database_url: str
) -> None:
    """A model name the server starts with is either refused at start (a clear error) or its
    vectors are saved under it; not a start followed by every save failing."""
    if not database_url.startswith("postgres"):
        pytest.skip("SQLite does not enforce a VARCHAR's length")
    embedder = load_embedder(server.url, model=LONG_NAME, dimensions=8)
    assert isinstance(embedder, EndpointEmbedder)
    ann = world.agent(world.user("Ann", "Acme"))
    memory = agent_memory(ann, "aisle seats on the morning flight")
    store.insert_memory(memory)
    drain(store, embedder)
    assert _has_vector(store, memory.id)


@pytest.mark.parametrize("backend", [name for name in BACKENDS if name == "postgresql"])
def test_upgrading_vectors_of_a_long_model_name_keeps_them(backend: str, tmp_path: Path) -> None:
    """A database whose endpoint vectors were stored (before 0026) under a 199-character model
    name upgrades to head, keeping every vector (as on SQLite)."""
    with fresh_database(backend, tmp_path) as url:
        settings = Settings(database_url=url)
        migrate(settings, "0025_cut_long_words")
        opened = open_store(settings)
        world = World(opened)
        agent = world.agent(world.user("Ann", "acme"))
        made = [agent_memory(agent, f"note {i}") for i in range(3)]
        opened.replace_memories(agent.tenant, made, [], made[0].inserted_at)
        rng = np.random.default_rng(23)
        vectors = rng.standard_normal((len(made), 8)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        opened.save_vectors(LONG_NAME, [memory.id for memory in made], vectors)
        opened.close()
        migrate(settings)
        engine = sa.create_engine(driver_url(url))
        with engine.connect() as conn:
            stored = conn.execute(sa.select(memory_vectors.c.model)).scalars().all()
        engine.dispose()
        assert stored == [f"{LONG_NAME}@8"] * len(made)


@pytest.mark.parametrize("backend", [name for name in BACKENDS if name == "postgresql"])
def test_a_database_that_ran_0026_before_the_widening_is_widened(
    backend: str, tmp_path: Path
) -> None:
    """A database upgraded past 0026 before 0026 widened the columns (they are `VARCHAR(200)`
    there) gets them widened by 0029: its endpoint's long name is saved after the upgrade."""
    with fresh_database(backend, tmp_path) as url:
        settings = Settings(database_url=url)
        migrate(settings)
        before = ScriptDirectory.from_config(alembic_config(url)).get_revision(WIDENING)
        assert before is not None
        engine = sa.create_engine(driver_url(url))
        with engine.begin() as conn:
            for table in WIDENED:
                conn.execute(sa.text(f"ALTER TABLE {table} ALTER COLUMN model TYPE VARCHAR(200)"))
            conn.execute(
                sa.text("UPDATE alembic_version SET version_num = :before"),
                {"before": before.down_revision},
            )
        migrate(settings)
        with engine.connect() as conn:
            types = conn.execute(
                sa.text(
                    "SELECT data_type FROM information_schema.columns "
                    "WHERE table_name IN ('memory_vectors', 'vector_chunks') "
                    "AND column_name = 'model'"
                )
            ).scalars()
            assert list(types) == ["text", "text"]
        engine.dispose()


# --- 2. an upgrade stopped inside 0026 on SQLite can never be finished ----------------------------


def test_an_upgrade_stopped_inside_a_migration_can_be_run_again(tmp_path: Path) -> None:
    """A migration that fails part-way (here its UPDATE refused, as a full disk or a kill -9
    would stop it; the kill is reproduced in docs/decisions.md) leaves the schema as it was, so
    that the next `mnemos migrate` (or `serve`) upgrades it."""
    path = tmp_path / "upgrade.db"
    settings = Settings(database_url=f"sqlite:///{path}")
    migrate(settings, "0025_cut_long_words")
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute(
        "INSERT INTO memory_vectors (tenant_id, memory_pk, model, scale, vector) "
        "VALUES (randomblob(16), 1, 'm', 1.0, randomblob(8))"
    )
    conn.execute(
        "CREATE TRIGGER stopped BEFORE UPDATE ON memory_vectors "
        "BEGIN SELECT RAISE(ABORT, 'disk full'); END"
    )
    conn.commit()
    with pytest.raises(sa.exc.IntegrityError, match="disk full"):
        migrate(settings)
    revision = conn.execute("SELECT version_num FROM alembic_version").fetchone()[0]
    columns = [row[1] for row in conn.execute("PRAGMA table_info(vector_queue)")]
    conn.execute("DROP TRIGGER stopped")
    conn.commit()
    conn.close()
    assert (revision, "refusals" in columns) == ("0025_cut_long_words", False)
    migrate(settings)  # the disk has room again


# --- 3. a move (export → import) forgets the idempotency keys: a retry stores a second memory ----


def test_a_retry_after_a_move_to_another_database_stores_nothing_new(
    client: TestClient, world: World, database_url: str, tmp_path: Path
) -> None:
    """An agent's store got no answer (a timeout) just before the operator moved the database
    (SQLite → PostgreSQL, or back: docs/operations.md); the agent retries with its
    `Idempotency-Key` on the moved server, within the key's day."""
    ann = world.agent(world.user("Ann", "Acme"))
    headers = {**ann.headers, "Idempotency-Key": "order-42"}
    first = client.post(AGENT, json=memory_body("window seat, please"), headers=headers)
    assert first.status_code == 201, first.text
    source = "postgresql" if database_url.startswith("postgres") else "sqlite"
    other = "sqlite" if source == "postgresql" else ("postgresql" if POSTGRES_URL else "sqlite")
    with fresh(other, tmp_path / "moved") as moved_url:
        import_database(moved_url, [*io.BytesIO(dump(database_url))])
        with client_on(moved_url) as moved:
            retry = moved.post(AGENT, json=memory_body("window seat, please"), headers=headers)
            listed = moved.get(AGENT, params={"limit": 10}, headers=ann.headers).json()["data"]
    assert retry.json()["data"]["id"] == first.json()["data"]["id"]
    assert len(listed) == 1


# --- 4. a rolling upgrade across 0026: vectors the old processes store are never searched --------


@pytest.mark.parametrize("mode", ["semantic"])
def test_a_memory_embedded_by_an_old_process_during_a_rolling_upgrade_is_found_by_meaning(
    settings: Settings, store: Store, world: World, server: EmbeddingsServer, mode: str
) -> None:
    """`mnemos migrate` ran (0026: stored vectors renamed `m@8`); a process started before it
    (code before 0026, whose `EndpointEmbedder.model` is the bare name `m`) goes on embedding
    until its restart, as the upgrade procedure allows. Its write is what `save_vectors("m", ...)`
    does here; then the restarted (current) servers search."""
    server.answer = good_answer
    embedder = load_embedder(server.url, model="m", dimensions=8)
    assert isinstance(embedder, EndpointEmbedder) and embedder.model == "m@8"
    ann = world.user("Ann", "acme")
    writer = world.agent(ann, "Writer")
    memory = agent_memory(writer, AISLE)
    store.insert_memory(memory)
    store.save_vectors("m", [memory.id], embedder.embed([AISLE]))  # the old process's worker
    with TestClient(create_app(settings, store, embedder), raise_server_exceptions=False) as client:
        drain(store, embedder)  # whatever the new servers queue, embedded
        found = client.get(SEARCH, params={"query": WORDS, "mode": mode}, headers=writer.headers)
    assert found.status_code == 200, found.text
    assert [row["id"] for row in found.json()["data"]] == [str(memory.id)]
