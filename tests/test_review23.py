"""A hostile review of durability, upgrades and data fidelity (review23).

Each test states the behaviour the finding asks for and is a strict xfail: it fails today for the
finding's reason (docs/decisions.md, "A hostile review of durability, upgrades and data fidelity
(2026-12-05, helper "review23")").
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from mnemos.config import Settings
from mnemos.embedding import load_embedder
from mnemos.embedding.remote import EndpointEmbedder
from mnemos.indexer import drain
from mnemos.storage import migrate, open_store
from mnemos.storage.base import Store
from mnemos.storage.postgres import driver_url
from mnemos.storage.schema import memory_vectors
from tests.conftest import BACKENDS
from tests.test_claim_fair import _has_vector
from tests.test_embedding import EmbeddingsServer
from tests.test_migration_tuya import fresh_database
from tests.world import World, agent_memory

LONG_NAME = "hf.co/" + "m" * 193
"""An endpoint's model name of 199 characters: it fits `model VARCHAR(200)` alone, as every
release before 0026 stored it, but not with its size (`@8`) that 0026 and the endpoint add."""


@pytest.fixture
def server() -> Iterator[EmbeddingsServer]:
    running = EmbeddingsServer()
    yield running
    running.close()


# --- 1. a long model name: 0026 stops the upgrade on PostgreSQL; at head no vector is saved -------


@pytest.mark.xfail(
    strict=True,
    reason="review23 finding 1: an endpoint's model name with its size overflows VARCHAR(200) "
    "on PostgreSQL: no vector is ever saved (SQLite does not enforce the length)",
)
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
@pytest.mark.xfail(
    strict=True,
    reason="review23 finding 1: migration 0026 appends '@<size>' to a stored model name of "
    "199 characters; PostgreSQL refuses the 201-character value and the upgrade stops",
)
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
