"""The vector search's layout and first pass (docs/search.md, "Vector storage"): every sealed
chunk carries its vectors' sign bits, a search ranks a scope by Hamming distance and scores the
closest exactly; on every backend, with constructed vectors whose exact answer is known."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from alembic import command
from numpy.typing import NDArray

from mnemos.config import Settings
from mnemos.domain.accounts import hash_key
from mnemos.domain.ids import utcnow
from mnemos.domain.memories import AgentListParams, MemoryService
from mnemos.domain.models import Memory, MemoryType, Scope
from mnemos.domain.queries import Audience, Filters
from mnemos.storage import alembic_config, migrate, open_store
from mnemos.storage.base import Store
from mnemos.storage.postgres import driver_url
from mnemos.storage.schema import vector_chunks, vector_tail
from mnemos.storage.sql_vectors import CHUNK_ROWS, RESCORE
from mnemos.storage.vector_codes import hamming, quantize, sign_bits, sign_scores
from tests.conftest import BACKENDS
from tests.test_migration_tuya import fresh_database
from tests.world import Actor, World, agent_memory

MODEL = "constructed@384"  # a model's key carries its size (migration 0026 adds it otherwise)
DIMS = 384


def unit(vectors: NDArray[np.float32]) -> NDArray[np.float32]:
    normed: NDArray[np.float32] = vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)
    return normed


def agent_memories(agent: Actor, count: int) -> list[Memory]:
    now = utcnow()
    return [agent_memory(agent, f"constructed {i}", now) for i in range(count)]


def saved(store: Store, agent: Actor, vectors: NDArray[np.float32]) -> list[uuid.UUID]:
    """Memories of `agent` with these vectors, saved as the embedding worker saves them (a
    batch at a time: full tails are sealed into chunks); their ids, in order."""
    made = agent_memories(agent, len(vectors))
    store.replace_memories(agent.tenant, made, [], made[0].inserted_at)
    ids = [memory.id for memory in made]
    for start in range(0, len(ids), 100):
        store.save_vectors(MODEL, ids[start : start + 100], vectors[start : start + 100])
    return ids


def agent_query(store: Store, agent: Actor) -> Any:
    found = store.agent_by_key(hash_key(agent.api_key))
    assert found is not None
    return MemoryService.agent_query(found, AgentListParams(), Filters())


def chunk_rows(store: Store) -> list[Any]:
    with store._read() as conn:  # type: ignore[attr-defined]
        return list(
            conn.execute(
                sa.select(
                    vector_chunks.c.rows, vector_chunks.c.vectors, vector_chunks.c.bits
                ).order_by(vector_chunks.c.owner, vector_chunks.c.seq)
            )
        )


def test_hamming_counts_the_components_that_differ_in_sign() -> None:
    rng = np.random.default_rng(5)
    for dims in (DIMS, 24):  # 48 bytes (64-bit words) and 3 bytes (the byte table)
        vectors = rng.integers(-127, 128, (50, dims)).astype(np.int8)
        probe = rng.standard_normal(dims).astype(np.float32)
        expected = ((vectors > 0) != (probe > 0)).sum(axis=1)
        assert hamming(sign_bits(vectors), sign_bits(probe)[0]).tolist() == expected.tolist()


@pytest.mark.parametrize("dims", [DIMS, 2056])  # 257 bytes a row: past uint16 table places
def test_sign_scores_are_the_probes_dot_product_with_the_signs(dims: int) -> None:
    rng = np.random.default_rng(6)
    vectors = rng.integers(-127, 128, (50, dims)).astype(np.int8)
    probe = unit(rng.standard_normal(dims).astype(np.float32))
    signs = np.where(vectors > 0, 1.0, -1.0).astype(np.float32)
    assert sign_scores(sign_bits(vectors), probe) == pytest.approx(signs @ probe, abs=1e-4)


def test_new_chunks_carry_the_sign_bits_of_their_vectors(store: Store, world: World) -> None:
    agent = world.agent(world.user("Ann", "acme"))
    rng = np.random.default_rng(1)
    saved(store, agent, unit(rng.standard_normal((CHUNK_ROWS + 30, DIMS)).astype(np.float32)))
    chunks = chunk_rows(store)
    assert chunks  # the agent's and nothing else: one sealed chunk, the rest in the tail
    for rows, vectors, bits in chunks:
        matrix = np.frombuffer(bytes(vectors), dtype=np.int8).reshape(rows, DIMS)
        assert bytes(bits) == sign_bits(matrix).tobytes()
        assert len(bytes(bits)) == rows * DIMS // 8


def test_the_bit_pass_and_rescoring_return_the_exact_top_k(store: Store, world: World) -> None:
    """Far more vectors than are rescored, in sealed chunks and a tail. The probe's ten
    nearest are made from the probe, each with its own, growing, perturbation; two of them are
    built so that sign bits and cosine disagree on their order: `quiet` flips the sign of the
    probe's 40 smallest components (far by Hamming, yet very close), `loud` keeps every sign
    but adds noise (no bit differs, yet further by cosine). The answer must be the exact top
    ten, in exact order, with exact scores."""
    agent = world.agent(world.user("Ann", "acme"))
    rng = np.random.default_rng(11)
    count = 7 * CHUNK_ROWS + 100
    assert count > 2 * RESCORE
    vectors = unit(rng.standard_normal((count, DIMS)).astype(np.float32))
    probe = unit(rng.standard_normal(DIMS).astype(np.float32))
    near = [
        unit(probe + rng.standard_normal(DIMS).astype(np.float32) * 0.01 * s) for s in range(1, 9)
    ]
    quiet = probe.copy()
    smallest = np.argsort(np.abs(probe))[:40]
    quiet[smallest] *= -1
    loud = np.abs(probe + rng.standard_normal(DIMS).astype(np.float32) * 0.06) * np.sign(probe)
    planted = [*near, unit(quiet), unit(loud)]
    places = [5, 300, 301, 600, 777, count - 1, count - 40, 40, 260, 700]  # chunks and tail
    for place, vector in zip(places, planted, strict=True):
        vectors[place] = vector
    ids = saved(store, agent, vectors)
    quantized, scales = quantize(vectors)
    exact = quantized.astype(np.float32) @ probe * scales
    top = np.argsort(-exact)[:10]
    assert sorted(top.tolist()) == sorted(places)
    bits = hamming(sign_bits(quantized), sign_bits(probe)[0])
    quiet_at, loud_at = places[-2], places[-1]
    assert bits[quiet_at] > bits[loud_at] and exact[quiet_at] > exact[loud_at]

    found = store.nearest_memories(agent_query(store, agent), probe, MODEL, 10)

    assert [scored.id for scored in found] == [ids[i] for i in top]
    assert [scored.score for scored in found] == pytest.approx(exact[top].tolist(), abs=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_migration_gives_chunks_sealed_before_it_their_bits(backend: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    quantized, scales = quantize(unit(rng.standard_normal((CHUNK_ROWS, DIMS)).astype(np.float32)))
    with fresh_database(backend, tmp_path) as url:
        migrate(Settings(database_url=url), "0011_history")
        engine = sa.create_engine(driver_url(url))
        # The table as revision 0011 made it: no bits.
        before = [c.name for c in vector_chunks.c if c.name not in ("tenant_id", "bits")]
        old = sa.table("vector_chunks", *[sa.column(name) for name in before])
        with engine.begin() as conn:
            conn.execute(
                old.insert().values(
                    owner="a" + uuid.uuid4().hex,
                    seq=1,
                    model=MODEL,
                    rows=CHUNK_ROWS,
                    pks=np.arange(CHUNK_ROWS, dtype="<i8").tobytes(),
                    scales=scales.tobytes(),
                    vectors=quantized.tobytes(),
                )
            )
        migrate(Settings(database_url=url), "0015_pages")  # 0016 rebuilds chunks from vectors
        with engine.connect() as conn:
            bits = conn.execute(sa.select(sa.column("bits")).select_from(old)).scalar_one()
        engine.dispose()
    assert bytes(bits) == sign_bits(quantized).tobytes()


# --- the layout is split by scope: an audience reads only what it may see ---------------------


def near_by_signs(probe: NDArray[np.float32], rng: np.random.Generator, count: int) -> Any:
    """Vectors with every sign of `probe` (closest possible by sign bits) but far from it by
    cosine (about 0.75): what fills a Hamming pass's candidates."""
    noise = rng.standard_normal((count, DIMS)).astype(np.float32) * 0.1
    return unit(np.abs(probe + noise) * np.sign(probe))


def close_but_flipped(probe: NDArray[np.float32]) -> NDArray[np.float32]:
    """Very close to `probe` by cosine (above 0.97), yet 60 sign bits away from it."""
    flipped = probe.copy()
    smallest = np.argsort(np.abs(probe))[:60]
    flipped[smallest] *= -1
    return unit(flipped)


def stored(store: Store, made: list[Memory], vectors: Any) -> list[uuid.UUID]:
    store.replace_memories(made[0].tenant_id, made, [], made[0].inserted_at)
    ids = [memory.id for memory in made]
    for start in range(0, len(ids), 100):
        store.save_vectors(MODEL, ids[start : start + 100], vectors[start : start + 100])
    return ids


def test_org_wide_search_is_not_crowded_out_by_memories_it_does_not_list(
    store: Store, world: World
) -> None:
    """The organization holds far more subject memories (about one person, which an org-wide
    list without `subject_id` does not show) near the query by sign bits than the search
    rescores; its organization memories are a few fillers and the right answer, close by cosine
    but further by sign bits. The org-wide search must find the answer: it reads only the
    organization-scoped memories' vectors (before the split it read every memory of the
    organization and rescored only subject memories and fillers)."""
    ann, bob = world.user("Ann", "acme"), world.user("Bob", "acme")
    mine, theirs = world.agent(ann), world.agent(bob)
    org = uuid.UUID(ann.organization_id)
    rng = np.random.default_rng(13)
    probe = unit(rng.standard_normal(DIMS).astype(np.float32))
    now = utcnow()
    about = {"scope": Scope.SUBJECT, "organization_id": org, "subject_id": uuid.uuid4()}
    hidden = [agent_memory(theirs, f"about someone {i}", now, **about) for i in range(600)]
    stored(store, hidden, near_by_signs(probe, rng, len(hidden)))
    shared = [
        agent_memory(theirs, f"shared {i}", now, scope=Scope.ORGANIZATION, organization_id=org)
        for i in range(31)
    ]
    vectors = np.vstack([close_but_flipped(probe)[None, :], near_by_signs(probe, rng, 30)])
    organization_ids = stored(store, shared, vectors)
    answer = organization_ids[0]
    found = store.agent_by_key(hash_key(mine.api_key))
    assert found is not None
    query = MemoryService.agent_query(found, AgentListParams(memory_scope="org"), Filters())

    top = store.nearest_memories(query, probe, MODEL, 10)

    assert [scored.id for scored in top][:1] == [answer]
    assert {scored.id for scored in top} <= set(organization_ids)


def test_a_filter_that_keeps_few_candidates_ranks_among_what_it_keeps(
    store: Store, world: World
) -> None:
    """`type=procedural` keeps a few dozen of an agent's memories: among the rescored
    candidates (chosen by sign bits) a few pass, enough to fill a page but not the right
    one; the search must then rank among the filtered memories only."""
    agent = world.agent(world.user("Ann", "acme"))
    rng = np.random.default_rng(17)
    probe = unit(rng.standard_normal(DIMS).astype(np.float32))
    now = utcnow()
    plain = [agent_memory(agent, f"plain {i}", now) for i in range(600)]
    stored(store, plain, near_by_signs(probe, rng, len(plain)))
    kind = {"type": MemoryType.PROCEDURAL}
    wanted = [agent_memory(agent, f"how-to {i}", now, **kind) for i in range(41)]
    vectors = np.vstack([close_but_flipped(probe)[None, :], near_by_signs(probe, rng, 40)])
    wanted_ids = stored(store, wanted, vectors)
    answer = wanted_ids[0]
    found = store.agent_by_key(hash_key(agent.api_key))
    assert found is not None
    query = MemoryService.agent_query(found, AgentListParams(), Filters(type=MemoryType.PROCEDURAL))

    top = store.nearest_memories(query, probe, MODEL, 10)

    assert len(top) == 10 and top[0].id == answer
    assert {scored.id for scored in top} <= set(wanted_ids)


@pytest.mark.parametrize("backend", BACKENDS)
def test_migration_keys_the_layout_by_scope(backend: str, tmp_path: Path) -> None:
    """0016 rebuilds the chunks and tails under scoped owner keys from the vectors alone (and
    its downgrade rebuilds the unscoped ones): every vector is under each of its owners' keys,
    once, and full tails are sealed."""
    with fresh_database(backend, tmp_path) as url:
        settings = Settings(database_url=url)
        migrate(settings)
        opened = open_store(settings)
        world = World(opened)
        ann = world.user("Ann", "acme")
        agent = world.agent(ann)
        org = uuid.UUID(ann.organization_id)
        now = utcnow()
        made = [agent_memory(agent, f"a {i}", now, organization_id=org) for i in range(300)]
        made += [
            agent_memory(agent, f"o {i}", now, scope=Scope.ORGANIZATION, organization_id=org)
            for i in range(20)
        ]
        rng = np.random.default_rng(3)
        stored(opened, made, unit(rng.standard_normal((len(made), DIMS)).astype(np.float32)))
        opened.close()
        config = alembic_config(settings.resolved_database_url())
        engine = sa.create_engine(driver_url(url))

        def layout() -> dict[str, int]:
            with engine.connect() as conn:
                sealed = conn.execute(
                    sa.select(vector_chunks.c.owner, sa.func.sum(vector_chunks.c.rows)).group_by(
                        vector_chunks.c.owner
                    )
                ).all()
                tails = conn.execute(
                    sa.select(vector_tail.c.owner, sa.func.count()).group_by(vector_tail.c.owner)
                ).all()
            counts: dict[str, int] = {}
            for owner, rows in [*sealed, *tails]:
                counts[owner] = counts.get(owner, 0) + int(rows)
            return counts

        scoped = {"aa" + agent.id.replace("-", ""): 300, "ao" + agent.id.replace("-", ""): 20}
        scoped |= {"oa" + org.hex: 300, "oo" + org.hex: 20}
        assert layout() == scoped
        command.downgrade(config, "0015_pages")
        unscoped = {"a" + agent.id.replace("-", ""): 320, "o" + org.hex: 320}
        assert layout() == unscoped
        command.upgrade(config, "head")
        assert layout() == scoped
        with engine.connect() as conn:
            sealed = conn.execute(sa.select(vector_chunks.c.rows)).scalars().all()
        assert sorted(sealed) == [128] * 4  # 0019 seals 256 a chunk, 0021 splits them in two
        engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
def test_migration_splits_chunks_in_two_and_keeps_keys_and_bits_in_the_row(
    backend: str, tmp_path: Path
) -> None:
    """0021 splits every chunk sealed before it (256 vectors) into chunks of `CHUNK_ROWS`
    (128) in order, each blob cut at the same vectors, and on PostgreSQL stores the keys and
    sign bits MAIN (in the row, where a search reads them): the answers do not change."""
    with fresh_database(backend, tmp_path) as url:
        settings = Settings(database_url=url)
        migrate(settings, "0019_vector_tenants")
        opened = open_store(settings)
        world = World(opened)
        agent = world.agent(world.user("Ann", "acme"))
        rng = np.random.default_rng(21)
        saved(
            opened, agent, unit(rng.standard_normal((2 * CHUNK_ROWS + 9, DIMS)).astype(np.float32))
        )
        probes = unit(rng.standard_normal((3, DIMS)).astype(np.float32))
        query = agent_query(opened, agent)
        engine = sa.create_engine(driver_url(url))
        C = vector_chunks.c
        with engine.begin() as conn:  # one chunk of 256, as the worker sealed them before 0021
            parts = conn.execute(sa.select(vector_chunks).order_by(C.seq)).all()
            assert [part.rows for part in parts] == [CHUNK_ROWS, CHUNK_ROWS]
            merged = {
                **parts[0]._mapping,
                "rows": 2 * CHUNK_ROWS,
                **{
                    name: bytes(parts[0]._mapping[name]) + bytes(parts[1]._mapping[name])
                    for name in ("pks", "scales", "vectors", "bits")
                },
            }
            conn.execute(vector_chunks.delete())
            conn.execute(vector_chunks.insert().values(**merged))
        before = [opened.nearest_memories(query, probe, MODEL, 10) for probe in probes]
        opened.close()

        migrate(settings)

        with engine.connect() as conn:
            after_parts = conn.execute(sa.select(vector_chunks).order_by(C.seq)).all()
            if backend == "postgresql":
                storage = dict(
                    conn.exec_driver_sql(
                        "SELECT attname, attstorage FROM pg_attribute "
                        "WHERE attrelid = 'vector_chunks'::regclass "
                        "AND attname IN ('pks', 'bits', 'owner')"
                    ).all()
                )
                assert storage == {"pks": "m", "bits": "m", "owner": "p"}
        engine.dispose()
        assert [(part.seq, part.rows) for part in after_parts] == [(1, 128), (2, 128)]
        for name in ("pks", "scales", "vectors", "bits"):
            assert [bytes(part._mapping[name]) for part in after_parts] == [
                bytes(part._mapping[name]) for part in parts
            ]
        reopened = open_store(settings)
        assert [reopened.nearest_memories(query, probe, MODEL, 10) for probe in probes] == before
        reopened.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_migration_puts_a_chunks_sign_bits_after_its_keys_on_sqlite(
    backend: str, tmp_path: Path
) -> None:
    """0024 makes SQLite's `vector_chunks` anew with `bits` right after `pks` (a search reads
    those two only; behind the 48 KB of `vectors` its read walked their overflow pages), every
    chunk copied as it was; PostgreSQL's table is left as it is. The answers do not change."""
    with fresh_database(backend, tmp_path) as url:
        settings = Settings(database_url=url)
        migrate(settings, "0023_request_id_length")
        opened = open_store(settings)
        world = World(opened)
        agent = world.agent(world.user("Ann", "acme"))
        rng = np.random.default_rng(24)
        saved(
            opened, agent, unit(rng.standard_normal((2 * CHUNK_ROWS + 5, DIMS)).astype(np.float32))
        )
        probes = unit(rng.standard_normal((3, DIMS)).astype(np.float32))
        query = agent_query(opened, agent)
        before = [opened.nearest_memories(query, probe, MODEL, 10) for probe in probes]
        opened.close()
        engine = sa.create_engine(driver_url(url))
        C = vector_chunks.c
        with engine.connect() as conn:
            parts = conn.execute(sa.select(vector_chunks).order_by(C.owner, C.seq)).all()
        assert len(parts) == 2

        migrate(settings)

        with engine.connect() as conn:
            after_parts = conn.execute(sa.select(vector_chunks).order_by(C.owner, C.seq)).all()
            columns = [column["name"] for column in sa.inspect(conn).get_columns("vector_chunks")]
            key = sa.inspect(conn).get_pk_constraint("vector_chunks")["constrained_columns"]
        engine.dispose()
        blobs = ["pks", "bits", "scales", "vectors"]
        if backend == "sqlite":
            assert columns[-4:] == blobs
        else:
            assert columns[-4:] == ["pks", "scales", "vectors", "bits"]
        assert key == ["tenant_id", "owner", "seq"]
        assert [dict(part._mapping) for part in after_parts] == [
            dict(part._mapping) for part in parts
        ]
        reopened = open_store(settings)
        assert [reopened.nearest_memories(query, probe, MODEL, 10) for probe in probes] == before
        reopened.close()


def test_the_check_asks_about_the_best_candidates_first(
    store: Store, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a filter that narrows the owners' memories, the best `limit` rescored
    candidates all pass the query's check: the other rescored candidates are not asked about.
    With a filter that keeps few, every rescored candidate is asked about (and the search
    ranks among what the filter keeps)."""
    agent = world.agent(world.user("Ann", "acme"))
    rng = np.random.default_rng(23)
    probe = unit(rng.standard_normal(DIMS).astype(np.float32))
    now = utcnow()
    plain = [agent_memory(agent, f"plain {i}", now) for i in range(RESCORE + 200)]
    stored(store, plain, near_by_signs(probe, rng, len(plain)))
    kind = {"type": MemoryType.PROCEDURAL}
    wanted = stored(store, [agent_memory(agent, "how-to", now, **kind)], probe[None, :])
    asked: list[int] = []

    class Asked(dict[str, Any]):
        def __setitem__(self, key: str, value: Any) -> None:
            if key == "candidates":
                asked.append(len(value))
            super().__setitem__(key, value)

    checked = store._checked  # type: ignore[attr-defined]

    def recording(*args: Any, **kwargs: Any) -> Any:
        statement, params = checked(*args, **kwargs)
        return statement, Asked(params)

    monkeypatch.setattr(store, "_checked", recording)
    found = store.agent_by_key(hash_key(agent.api_key))
    assert found is not None

    everything = MemoryService.agent_query(found, AgentListParams(), Filters())
    assert len(store.nearest_memories(everything, probe, MODEL, 10)) == 10
    assert asked == [10]

    asked.clear()
    few = MemoryService.agent_query(found, AgentListParams(), Filters(type=MemoryType.PROCEDURAL))
    assert [scored.id for scored in store.nearest_memories(few, probe, MODEL, 10)] == wanted
    assert asked[:2] == [10, RESCORE - 10]


def test_a_persons_search_by_meaning_reads_every_tenant_about_them_and_nothing_else(
    store: Store, world: World
) -> None:
    """A person's audience reaches every tenant holding memories about them (the blob reads
    bind those tenants: one, several, a chunk and a tail): all their memories, and none about
    someone else in the same tenants, however close (review7)."""
    person, other = world.user("Subject", None), world.user("Someone", None)
    rng = np.random.default_rng(7)
    probe = unit(rng.standard_normal(DIMS).astype(np.float32))
    about: dict[str, list[uuid.UUID]] = {"person": [], "other": []}
    for org, count in (("t-a", 260), ("t-b", 3), ("t-c", 1)):
        agent = world.agent(world.user("Writer", org))
        assert agent.organization_id is not None
        for name, subject, n in (("person", person, count), ("other", other, 5)):
            made = [
                agent_memory(
                    agent,
                    f"about {name} {i}",
                    scope=Scope.SUBJECT,
                    subject_id=uuid.UUID(subject.id),
                    organization_id=uuid.UUID(agent.organization_id),
                )
                for i in range(n)
            ]
            store.replace_memories(agent.tenant, made, [], made[0].inserted_at)
            ids = [memory.id for memory in made]
            # someone else's are the closest of all
            near = probe if name == "other" else rng.standard_normal(DIMS).astype(np.float32)
            vectors = unit(np.stack([near + 0.01 * rng.standard_normal(DIMS) for _ in ids]))
            for start in range(0, n, 100):
                store.save_vectors(MODEL, ids[start : start + 100], vectors[start : start + 100])
            about[name] += ids
    audience = Audience(subject_id=uuid.UUID(person.id), scopes=(Scope.SUBJECT,))
    query = Filters().within((audience,))
    found = store.nearest_memories(query, probe, MODEL, 200)
    assert len(found) == 200 and {s.id for s in found} <= set(about["person"])
    everything = store.nearest_memories(query, probe, MODEL, 1000)
    assert sorted(s.id for s in everything) == sorted(about["person"])
