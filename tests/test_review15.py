"""Seventh hostile review (review15): findings in what landed since 431f6d4.

Each test states the behaviour the finding asks for and failed, when written, for the finding's
reason; all are fixed (docs/decisions.md, "Seventh hostile review: what was fixed")."""

from __future__ import annotations

import io
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.storage import open_store
from mnemos.storage.base import Store
from mnemos.storage.postgres import driver_url
from mnemos.storage.schema import memories, memory_history
from mnemos.storage.transfer_import import import_database
from tests.conftest import BACKENDS, _empty_postgres
from tests.live.conftest import LiveServer, _database_for, start_server, stop_server
from tests.test_transfer import dump, fresh
from tests.world import World, memory_body

BASE = "/api/v1/agent/memories"


# --- PostgreSQL pings a pooled connection only after a second idle ---------------------------


@pytest.fixture
def postgres_url(request: pytest.FixtureRequest) -> str:
    """PostgreSQL's test database, emptied: the finding is about its pool alone."""
    if "postgresql" not in BACKENDS:
        pytest.skip("no PostgreSQL server")
    url: str = request.getfixturevalue("postgres_ready")
    _empty_postgres(url)
    return url


def test_a_request_after_its_pooled_connection_was_terminated_is_answered(
    postgres_url: str,
) -> None:
    """pgsem14's `ping_when_idle` pinged a pooled connection only when it sat idle a second or
    more; one handed back a moment ago was handed out unchecked. A backend ended by the server
    since (`pg_terminate_backend`, a proxy or pooler dropping its server connections, a
    failover back within the second) failed the next request's statement: 503
    `storage_unavailable`, where `pool_pre_ping` replaces the connection and answers 200
    (fixed by going back to `pool_pre_ping`)."""
    settings = Settings(database_url=postgres_url, rate_limit_per_minute=0, embedder="none")
    store = open_store(settings)
    try:
        with TestClient(create_app(settings, store)) as client:
            agent = World(store).agent(World(store).user("Ann", "r15-kill"))
            stored = client.post(BASE, json=memory_body("one"), headers=agent.headers)
            assert stored.status_code == 201, stored.text
            admin = sa.create_engine(driver_url(postgres_url), poolclass=sa.pool.NullPool)
            with admin.connect() as conn:
                killed = conn.execute(
                    sa.text(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
                ).scalar_one()
            admin.dispose()
            assert killed > 0
            listed = client.get(BASE, headers=agent.headers)
            assert listed.status_code == 200, listed.text
    finally:
        store.close()


# --- import --merge passes over held memories with their history ------------------------------


def test_a_merge_does_not_add_a_deletion_to_the_history_of_a_memory_the_target_holds(
    client: TestClient, world: World, database_url: str, tmp_path: Path
) -> None:
    """`_not_held` passes over the history rows of the file's memories that the target holds
    (`Held.passed_over`), but a memory deleted at the source is not in the file at all: its
    `deleted` history row (kept, `SqlBase._delete_memories`) is merged onto the target's live
    copy. Last night's export imported, today's merged (the documented use): the target's
    memory is active and its history says it was deleted."""
    ann = world.user("Ann", "r15-merge")
    agent = world.agent(ann)
    stored = client.post(BASE, json=memory_body("kept there"), headers=agent.headers)
    assert stored.status_code == 201, stored.text
    memory_id = uuid.UUID(stored.json()["data"]["id"])
    last_night = dump(database_url)
    gone = client.delete(f"/api/v1/me/memories/{memory_id}", headers=ann.headers)
    assert gone.status_code == 204, gone.text
    today = dump(database_url)

    backend = "postgresql" if database_url.startswith("postgresql") else "sqlite"
    with fresh(backend, tmp_path / "target") as target:
        import_database(target, [*io.BytesIO(last_night)])
        import_database(target, [*io.BytesIO(today)], merge=True)
        there = sa.create_engine(target)
        try:
            with there.connect() as conn:
                status = conn.execute(
                    sa.select(memories.c.status).where(memories.c.id == memory_id)
                ).scalar_one()
                events = (
                    conn.execute(
                        sa.select(memory_history.c.event).where(
                            memory_history.c.memory_id == memory_id
                        )
                    )
                    .scalars()
                    .all()
                )
        finally:
            there.dispose()
    assert status == "active"
    assert "deleted" not in events, events


def test_a_merge_does_not_bring_back_a_memory_the_target_deleted(
    client: TestClient, world: World, database_url: str
) -> None:
    """review14's erasure finding was fixed for erasures only (`_not_erased` reads the
    target's `erasures`): a single memory a person deletes (`DELETE /api/v1/me/memories/{id}`,
    a memory about them) leaves its `deleted` history row in the target, yet merging an export
    taken before the deletion (the documented use) stores it again, active, and the person
    sees it back. Suggested: with --merge, pass over a memory whose id the target's history
    records as `deleted` (read once per batch, as `_held_keys` does)."""
    ann = world.user("Ann", "r15-deleted")
    agent = world.agent(world.user("Bob", "r15-deleted"))
    body = memory_body("ann's phone is 555-0100", scope="subject", subject_id=ann.id)
    stored = client.post(BASE, json=body, headers=agent.headers)
    assert stored.status_code == 201, stored.text
    memory_id = stored.json()["data"]["id"]
    before = dump(database_url)
    gone = client.delete(f"/api/v1/me/memories/{memory_id}", headers=ann.headers)
    assert gone.status_code == 204, gone.text
    import_database(database_url, [*io.BytesIO(before)], merge=True)
    again = client.get(f"/api/v1/me/memories/{memory_id}", headers=ann.headers)
    assert again.status_code == 404, again.text


# --- malformed HTTP answered in the error shape (`http_guard._may_answer`) --------------------


@pytest.fixture(scope="module", params=BACKENDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("review15")
    databases = _database_for(request.param, tmp)
    live = start_server(next(databases), tmp)
    try:
        yield live
    finally:
        stop_server(live)
        databases.close()


BAD_BODY = (  # review16: a whole head, then a bad chunk size while it waits in the queue
    b"POST /api/v1/agent/memories HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
)


@pytest.mark.live
@pytest.mark.parametrize("malformed", [b"GARBAGE\r\n\r\n", BAD_BODY], ids=["head", "body"])
def test_a_pipelined_request_is_answered_before_a_malformed_one_is_refused(
    server: LiveServer, malformed: bytes
) -> None:
    """A request whose head is malformed while the one before it on the connection is still
    handled is not answered (`_may_answer`: the answer would not be the next on the wire), but
    `_refuse` closes the connection at once. The request before it is still run by the
    application (one that reads no body, or whose body is in: here a key rotation, done) and
    its answer is dropped: the person's new key is lost with it, the old one refused (401).
    (uvicorn's own 400 used to be written in its place.) The refusal could wait for that answer
    to be sent, as uvicorn's pipeline waits, then be written and close."""
    org = server.admin("create-org", "--name", "R15")["id"]
    email = f"ann-{uuid.uuid4().hex[:8]}@r15.test"  # one server for every case
    ann = server.admin("create-user", "--name", "Ann", "--email", email, "--org", org)
    port = int(server.base_url.rsplit(":", 1)[1])
    rotate = (
        b"POST /api/v1/me/api-key/rotate HTTP/1.1\r\nHost: t\r\nX-API-Key: "
        + ann["api_key"].encode()
        + b"\r\nContent-Length: 0\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(rotate + malformed)
        answers = b""
        while chunk := sock.recv(65536):
            answers += chunk
    assert answers.startswith(b"HTTP/1.1 200 OK\r\n"), answers
    assert b"HTTP/1.1 400 Bad Request\r\n" in answers  # then the refusal, then the end


def test_a_merge_leaves_out_tuya_token_pairs(store: Store, database_url: str) -> None:
    """review15's note: a merge put back a Tuya token pair that the target had replaced at a
    refresh (valid again there until it expires). Token pairs are left out of a merge."""
    from datetime import timedelta

    from mnemos.domain.ids import utcnow
    from mnemos.storage.schema import tuya_tokens

    world = World(store)
    org = uuid.UUID(world.org("r15-tokens"))
    store.create_tuya_project("r15-client", "s" * 32, org)
    old_pair = uuid.uuid4()
    later = utcnow() + timedelta(hours=2)
    store.save_tuya_tokens(
        "r15-client", old_pair, {"access": ("a" * 64, later), "refresh": ("r" * 64, later)}
    )
    before = dump(database_url)
    store.save_tuya_tokens(  # the connector refreshed: the old pair is gone
        "r15-client",
        uuid.uuid4(),
        {"access": ("b" * 64, later), "refresh": ("q" * 64, later)},
        replaces=old_pair,
    )
    summary = import_database(database_url, [*io.BytesIO(before)], merge=True).as_json()
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as conn:
            pairs = set(conn.execute(sa.select(tuya_tokens.c.pair_id)).scalars())
    finally:
        engine.dispose()
    assert old_pair not in pairs
    assert summary["tables"]["tuya_tokens"] == {"rows": 0, "skipped": 2}
