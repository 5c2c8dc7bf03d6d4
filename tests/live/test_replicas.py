"""Read replicas: reads go to a real streaming replica, a caller always reads its own writes
(across processes), and a paused or stopped replica leaves rotation without failing a request.

The replica is a real standby of a throwaway primary (`tests/pgcluster.py`); what served a read
is read from the servers' own statistics (scans of `memories`), never from Mnemos.
"""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import httpx
import numpy as np
import psycopg
import pytest
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain.tenants import Tenants
from mnemos.storage import check_settings, migrate, open_store
from mnemos.storage.base import Store
from tests.conftest import Replicated, wait_for_rotation
from tests.live.conftest import LiveServer, start_server, stop_server
from tests.pgcluster import (
    postgres_bin,
    replica_pair,
    replica_scans,
    wait_for_replay,
)
from tests.world import Actor, World, agent_memory, memory_body

pytestmark = pytest.mark.skipif(
    postgres_bin() is None,
    reason="PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup) are not installed",
)
AGENT, HUMAN = "/api/v1/agent/memories", "/api/v1/me/memories"
T = TypeVar("T")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Replicated]:
    with replica_pair() as (primary, replica):
        pair = Replicated(primary, replica)
        primary.sql(f"CREATE DATABASE {pair.database}")
        migrate(Settings(database_url=pair.urls()[0]))
        yield pair


@pytest.fixture
def pair(cluster: Replicated) -> Iterator[Replicated]:
    """The pair with its replica running and replaying, before and after each test."""

    def ready() -> None:
        if not cluster.replica.running():
            cluster.replica.start()
        cluster.replica.sql("SELECT pg_wal_replay_resume()")
        wait_for_replay(cluster.primary, cluster.replica)

    ready()
    yield cluster
    ready()


def settings_for(pair: Replicated, **more: object) -> Settings:
    primary, replica = pair.urls()
    return Settings(
        database_url=primary, database_replica_urls=replica, rate_limit_per_minute=0, **more
    )


@pytest.fixture
def store(pair: Replicated) -> Iterator[Store]:
    """A store whose replica stays in rotation while its checks are held off for a while."""
    opened = open_store(settings_for(pair, replica_max_lag_seconds=60.0))
    wait_for_rotation(opened)
    yield opened
    opened.close()


def settled_scans(pair: Replicated) -> tuple[int, int]:
    """Scans of `memories` so far: (on the primary, on the replica). A session reports its
    statistics as it ends, so this waits until every other session on both servers has."""
    import time

    others = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
    )
    deadline = time.monotonic() + 60
    while pair.primary.sql(others) or pair.replica.sql(others):
        assert time.monotonic() < deadline, "sessions still open"
        time.sleep(0.05)
    return replica_scans(pair.primary), replica_scans(pair.replica)


def agent_in(world: World, org: str) -> Actor:
    return world.agent(world.user(f"Owner of {org}", org))


def test_lists_and_gets_run_on_the_replica_and_writes_on_the_primary(pair: Replicated) -> None:
    # No embedding worker: it is a writer, and reads the memories it embeds on the primary (one
    # process's worker now starts with the app and shares its embedder). A generous lag bound: on
    # a busy machine a replica a second behind leaves rotation, and its reads rightly go to the
    # primary (tested below); here only where each kind of request goes is checked.
    settings = settings_for(pair, embedder="none", replica_max_lag_seconds=60.0)
    store = open_store(settings)
    agent = agent_in(World(store), "Reads")
    with TestClient(create_app(settings, store)) as client:
        ids = [
            client.post(AGENT, json=memory_body(f"note {i}"), headers=agent.headers).json()["data"][
                "id"
            ]
            for i in range(3)
        ]
    store.close()  # its sessions end: their statistics are reported
    wait_for_replay(pair.primary, pair.replica)
    before = settled_scans(pair)

    store = open_store(settings)
    wait_for_rotation(store)
    with TestClient(create_app(settings, store)) as client:
        for _ in range(10):
            listed = client.get(AGENT, headers=agent.headers).json()["data"]
            assert [m["id"] for m in listed] == ids[::-1]
            assert client.get(f"{AGENT}/{ids[0]}", headers=agent.headers).status_code == 200
    store.close()

    primary, replica = settled_scans(pair)
    assert replica >= before[1] + 20  # 10 lists and 10 gets
    assert primary == before[0]  # not one memory read on the primary


def test_a_caller_reads_its_writes_at_once_from_another_process(
    pair: Replicated, tmp_path: Path
) -> None:
    primary_url, replica_url = pair.urls()
    # However far behind it falls, the replica stays in rotation: only the write marks can send
    # a read to the primary.
    env = {"MNEMOS_DATABASE_REPLICA_URLS": replica_url, "MNEMOS_REPLICA_MAX_LAG_SECONDS": "3600"}
    first = start_server(primary_url, tmp_path, settings=env)
    second = start_server(primary_url, tmp_path, settings=env)
    try:
        org = first.admin("create-org", "--name", "Acme")["id"]
        user = first.admin("create-user", "--name", "U", "--email", "u@acme.test", "--org", org)
        agent = first.admin("create-agent", "--owner", user["id"], "--name", "A")
        wait_for_replay(pair.primary, pair.replica)
        for server in (first, second):
            wait_for_replicas(server, in_rotation=1)
        pair.replica.sql("SELECT pg_wal_replay_pause()")

        with (
            httpx.Client(base_url=first.base_url, headers={"X-API-Key": agent["api_key"]}) as a,
            httpx.Client(base_url=second.base_url, headers={"X-API-Key": agent["api_key"]}) as b,
            httpx.Client(base_url=second.base_url, headers={"X-API-Key": user["api_key"]}) as u,
        ):
            for i in range(3):
                body = memory_body(f"note {i}", scope="organization")
                made = a.post(AGENT, json=body).json()["data"]
                assert b.get(f"{AGENT}/{made['id']}").json()["data"] == made
                assert b.get(AGENT).json()["data"][0] == made
                # Another credential of the same organization sees it too.
                assert (
                    u.get(HUMAN, params={"scope": "organization"}).json()["data"][0]["id"]
                    == (made["id"])
                )
            archived = a.post(f"{AGENT}/{made['id']}/archive")
            assert archived.status_code == 200
            assert b.get(f"{AGENT}/{made['id']}").json()["data"]["status"] == "archived"
        # All along the replica was in rotation (and is still paused behind these writes).
        assert health(second)["replicas"] == {"configured": 1, "in_rotation": 1}
    finally:
        stop_server(first)
        stop_server(second)


def health(server: LiveServer) -> dict[str, object]:
    answer: dict[str, object] = httpx.get(f"{server.base_url}/healthz", timeout=10).json()
    return answer


def wait_for_replicas(server: LiveServer, in_rotation: int) -> None:
    import time

    deadline = time.monotonic() + 60
    while health(server).get("replicas", {}) != {"configured": 1, "in_rotation": in_rotation}:
        assert time.monotonic() < deadline, health(server)
        time.sleep(0.05)


def test_a_paused_replica_leaves_rotation_and_reads_stay_correct(pair: Replicated) -> None:
    settings = settings_for(pair)
    store = open_store(settings)
    world = World(store)
    reader = agent_in(world, "Readers")
    writer = agent_in(world, "Writers")
    with TestClient(create_app(settings, store)) as client:
        mine = client.post(AGENT, json=memory_body("mine"), headers=reader.headers).json()["data"]
        wait_for_replay(pair.primary, pair.replica)
        wait_for_rotation(store)
        pair.replica.sql("SELECT pg_wal_replay_pause()")
        # Another tenant keeps writing: the replica falls behind, and out of rotation.
        for i in range(3):
            assert client.post(AGENT, json=memory_body(f"w{i}"), headers=writer.headers).is_success
        wait_until(lambda: not store.replica_status()[0].in_rotation, store)
        assert (store.replica_status()[0].behind_seconds or 0) > 1.0
        assert client.get("/healthz").json()["replicas"] == {"configured": 1, "in_rotation": 0}
        for actor, expected in ((reader, ["mine"]), (writer, ["w2", "w1", "w0"])):
            got = client.get(AGENT, headers=actor.headers).json()["data"]
            assert [m["content"] for m in got] == expected
    store.close()  # its sessions end and report their statistics

    # Where those reads ran: another process, same state; count what each server scans.
    before = settled_scans(pair)
    store = open_store(settings)
    with TestClient(create_app(settings, store)) as client:
        for _ in range(5):
            got = client.get(AGENT, headers=reader.headers).json()["data"]
            assert [m["id"] for m in got] == [mine["id"]]
        assert not store.replica_status()[0].in_rotation
    store.close()
    primary, replica = settled_scans(pair)
    assert primary >= before[0] + 5
    assert replica == before[1]  # none on the paused replica

    pair.replica.sql("SELECT pg_wal_replay_resume()")
    store = open_store(settings)
    try:
        wait_for_rotation(store)  # back once it has caught up
    finally:
        store.close()


def wait_until(condition: object, store: Store) -> None:
    import time

    assert callable(condition)
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, store.replica_status()
        time.sleep(0.05)


def as_tenant(store: Store, actor: Actor, read: Callable[[], T]) -> T:
    """Run `read` as the API would for `actor`'s requests (in a context of its own)."""

    def run() -> T:
        org = uuid.UUID(actor.organization_id) if actor.organization_id else None
        store.act_for(org, uuid.UUID(actor.id))
        return read()

    return contextvars.copy_context().run(run)


def marks(pair: Replicated) -> dict[str, int]:
    with psycopg.connect(pair.urls()[0], autocommit=True) as conn:
        return dict(conn.execute("SELECT tenant, lsn FROM write_marks").fetchall())


def test_the_embedding_worker_moves_only_its_memories_tenants_marks(
    pair: Replicated, store: Store
) -> None:
    """The worker acts for no caller. Its save of a memory's vector moves that memory's
    tenant's mark (searches by meaning then find it on a replica once replayed), never the
    mark of writes made for no one, which every reader of every tenant waits for: otherwise,
    under steady stores, every tenant's reads left the replicas after each save."""
    world = World(store)
    ours, theirs = agent_in(world, "Embedded"), agent_in(world, "Elsewhere")
    memory = agent_memory(ours, "an aisle seat on long flights")
    store.replace_memories(ours.tenant, [memory], [], memory.inserted_at)
    before = marks(pair)

    def save() -> int:  # as the worker's thread: acting for no one
        vector = np.ones((1, 384), dtype=np.float32) / np.sqrt(384)
        return store.save_vectors("test-model", [memory.id], vector)

    assert contextvars.Context().run(save) == 1
    after = marks(pair)
    assert after.get("*") == before.get("*")
    ours_key = f"org:{ours.organization_id}"
    assert after[ours_key] > before.get(ours_key, 0)
    theirs_key = f"org:{theirs.organization_id}"
    assert after.get(theirs_key) == before.get(theirs_key)


@pytest.fixture
def stored(pair: Replicated, store: Store) -> tuple[Actor, Actor, uuid.UUID]:
    """A person, their agent and a memory the agent stored, with the replica in rotation and
    known to hold it (so the next read goes there)."""
    world = World(store)
    person = world.user(f"Pat{uuid.uuid4().hex[:8]}", "Stops")
    agent = world.agent(person)
    # No embedding worker: its save of the memory's vector moves the tenant's mark after the
    # replay waited for (an unflushed lazy commit), and the reads below then rightly go to the
    # primary, never meeting the stopped replica.
    with TestClient(create_app(settings_for(pair, embedder="none"), store)) as client:
        body = memory_body("kept", scope="organization")
        made = client.post(AGENT, json=body, headers=agent.headers).json()["data"]
        wait_for_replay(pair.primary, pair.replica)
        wait_for_rotation(store)
        assert client.get(AGENT, headers=agent.headers).json()["data"] == [made]
    return person, agent, uuid.UUID(made["id"])


def test_a_replica_that_dies_under_a_read_fails_no_request(
    pair: Replicated,
    store: Store,
    stored: tuple[Actor, Actor, uuid.UUID],
    caplog: pytest.LogCaptureFixture,
) -> None:
    person, agent, ident = stored
    with frozen_checks(store):  # still in rotation when the read meets it dead
        pair.replica.stop("immediate")
        assert store.replica_status()[0].in_rotation
        reach = Tenants((agent.tenant,))
        memory = as_tenant(store, agent, lambda: store.get_memory(ident, reach))
        assert memory is not None and memory.content == "kept"
    assert "out of rotation" in caplog.text  # the read failed there, and ran on the primary
    with TestClient(create_app(settings_for(pair, embedder="none"), store)) as client:
        wait_until(lambda: not store.replica_status()[0].in_rotation, store)
        for _ in range(3):
            assert client.get(f"{AGENT}/{ident}", headers=agent.headers).status_code == 200
            page = client.get(HUMAN, params={"page": 1, "page_size": 5}, headers=person.headers)
            assert page.json()["data"][0]["id"] == str(ident)
        pair.replica.start()
        wait_for_rotation(store)  # back in rotation once it answers again
        assert client.get(AGENT, headers=agent.headers).json()["data"][0]["id"] == str(ident)


def test_a_replica_that_stops_inside_a_snapshot_fails_no_request(
    pair: Replicated,
    store: Store,
    stored: tuple[Actor, Actor, uuid.UUID],
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, agent, ident = stored
    reach = Tenants((agent.tenant,))

    def page_and_total() -> tuple[object, object]:
        with store.snapshot():  # as an offset page reads its rows, then its total
            first = store.get_memory(ident, reach)
            pair.replica.stop("fast")
            return first, store.get_memory(ident, reach)

    with frozen_checks(store):
        first, second = as_tenant(store, agent, page_and_total)
    assert first == second and first is not None
    assert "out of rotation" in caplog.text


@contextmanager
def frozen_checks(store: Store) -> Iterator[None]:
    """Hold off the background checks, so that a request is the first to meet a dead replica."""
    replicas = store._replicas  # type: ignore[attr-defined]
    with replicas._checking:
        yield


def test_sqlite_refuses_replicas(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'x.db'}",
        database_replica_urls="postgresql://replica.internal/mnemos",
    )
    with pytest.raises(ValueError, match="needs a PostgreSQL"):
        check_settings(settings)
    with pytest.raises(ValueError, match="needs a PostgreSQL"):
        open_store(settings)


def test_replica_urls_must_be_postgresql() -> None:
    settings = Settings(
        database_url="postgresql://primary.internal/mnemos",
        database_replica_urls=f"postgresql://a/m, sqlite:///{uuid.uuid4()}.db",
    )
    assert settings.replica_urls()[0] == "postgresql://a/m"
    with pytest.raises(ValueError, match="must be postgresql"):
        check_settings(settings)
