"""Eighth hostile review (review16): findings in what landed since b8c5c2e.

Each test states the behaviour the finding asks for and failed, when written, for the finding's
reason; all are fixed (docs/decisions.md, "Eighth hostile review: what was fixed")."""

from __future__ import annotations

import io
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.config import Settings
from mnemos.storage import open_store
from mnemos.storage.schema import memories, memory_history
from mnemos.storage.transfer_import import import_database
from tests.conftest import BACKENDS
from tests.live.conftest import LiveServer, _database_for, start_server, stop_server
from tests.test_transfer import dump, fresh
from tests.world import World, memory_body

BASE = "/api/v1/agent/memories"


# --- a merge adds history to a memory the target deleted (`_new_memories_history`) ----------


def test_a_merge_adds_no_history_to_a_memory_the_target_deleted(
    client: TestClient, world: World, database_url: str, tmp_path: Path
) -> None:
    """review15's fix 2 takes history rows only for memories this merge added or "that the
    target never held" (`_new_memories_history`), but it tells the latter by the `memories`
    table alone: a memory the target deleted is no longer there, so the file's history rows of
    it are all taken. Another server's copy of this database (the documented use: a copy
    merged back), where the same memory was deleted too: merged, the target's history of it
    says it was deleted twice, by two people at two times; an `archived`/`restored` made there
    after our deletion would be added as well. Suggested: count a memory whose deletion the
    target records (`_deleted`) as one it held, as `_not_held` does for the memory rows."""
    ann = world.user("Ann", "r16-twice")
    agent = world.agent(ann)
    stored = client.post(BASE, json=memory_body("deleted on both sides"), headers=agent.headers)
    assert stored.status_code == 201, stored.text
    memory_id = uuid.UUID(stored.json()["data"]["id"])
    copied = dump(database_url)

    backend = "postgresql" if database_url.startswith("postgresql") else "sqlite"
    with fresh(backend, tmp_path / "copy") as copy:
        import_database(copy, [*io.BytesIO(copied)])
        there = sa.create_engine(copy)
        try:
            with there.connect() as conn:
                tenant = conn.execute(
                    sa.select(memories.c.tenant_id).where(memories.c.id == memory_id)
                ).scalar_one()
        finally:
            there.dispose()
        other = open_store(Settings(database_url=copy, embedder="none"))
        try:
            assert other.delete_memory(tenant, memory_id)
        finally:
            other.close()
        theirs = dump(copy)

    gone = client.delete(f"/api/v1/me/memories/{memory_id}", headers=ann.headers)
    assert gone.status_code == 204, gone.text
    import_database(database_url, [*io.BytesIO(theirs)], merge=True)
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as conn:
            events = (
                conn.execute(
                    sa.select(memory_history.c.event).where(memory_history.c.memory_id == memory_id)
                )
                .scalars()
                .all()
            )
    finally:
        engine.dispose()
    assert sorted(events) == ["created", "deleted"], events


def test_a_merge_adds_no_history_about_an_erased_person_of_a_memory_from_before(
    client: TestClient, world: World, database_url: str, tmp_path: Path
) -> None:
    """The same gap with an erasure: it deletes the person's memories and their history, so
    the target keeps no trace of a memory about them; another server's copy taken before the
    erasure then deletes that memory itself. Merged, `_not_erased` keeps the `deleted` row (it
    was written after the erasure) and `_new_memories_history` keeps it too (the memory is in
    neither file nor target): the target, which erased Ann, now holds a history row about her
    (`subject_id`, the memory's id, who deleted it and when) for a memory stored before her
    erasure. Suggested: leave out the history rows of a memory whose `created` row the merge
    left out as erased (or that the file's memory rows do not hold and whose subject the
    target erased after the memory's first history row)."""
    ann = world.user("Ann", "r16-erased")
    agent = world.agent(world.user("Bob", "r16-erased"))
    body = memory_body("ann's salary is 80k", scope="subject", subject_id=ann.id)
    stored = client.post(BASE, json=body, headers=agent.headers)
    assert stored.status_code == 201, stored.text
    memory_id = uuid.UUID(stored.json()["data"]["id"])
    copied = dump(database_url)
    erased = client.post("/api/v1/me/memories/erase", json={"confirm": True}, headers=ann.headers)
    assert erased.json()["data"]["erased"] == 1, erased.text

    backend = "postgresql" if database_url.startswith("postgresql") else "sqlite"
    with fresh(backend, tmp_path / "copy") as copy:
        import_database(copy, [*io.BytesIO(copied)])
        there = sa.create_engine(copy)
        try:
            with there.connect() as conn:
                tenant = conn.execute(
                    sa.select(memories.c.tenant_id).where(memories.c.id == memory_id)
                ).scalar_one()
        finally:
            there.dispose()
        other = open_store(Settings(database_url=copy, embedder="none"))
        try:
            assert other.delete_memory(tenant, memory_id)
        finally:
            other.close()
        theirs = dump(copy)

    import_database(database_url, [*io.BytesIO(theirs)], merge=True)
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as conn:
            about_ann = conn.execute(
                sa.select(memory_history.c.memory_id, memory_history.c.event).where(
                    memory_history.c.subject_id == uuid.UUID(str(ann.id))
                )
            ).all()
    finally:
        engine.dispose()
    assert about_ann == [], about_ann


# --- a refusal in a pipelined request's body drops the answer before it (`_refuse`) ---------


@pytest.fixture(scope="module", params=BACKENDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("review16")
    databases = _database_for(request.param, tmp)
    live = start_server(next(databases), tmp)
    try:
        yield live
    finally:
        stop_server(live)
        databases.close()


@pytest.mark.live
def test_a_pipelined_request_is_answered_before_a_malformed_body_after_it_is_refused(
    server: LiveServer,
) -> None:
    """review15's fix holds a refusal behind the answers before it only while a head is read
    (`_refuse`: `elif self._reading_head`). A request whose head is whole but whose body is
    malformed (a bad chunk size) while it waits in uvicorn's pipeline behind another takes the
    `else` branch, `transport.close()`, whose comment says "its own request is running": it is
    not, the one before it is. That one (a key rotation here) is still run by the application,
    and its answer is dropped: the person's new key is lost, the old one refused. Suggested:
    hold the refusal as for a head whenever `self.pipeline` holds the refused request (its own
    cycle never started), and drop that cycle from the pipeline."""
    org = server.admin("create-org", "--name", "R16")["id"]
    ann = server.admin("create-user", "--name", "Ann", "--email", "ann@r16.test", "--org", org)
    port = int(server.base_url.rsplit(":", 1)[1])
    rotate = (
        b"POST /api/v1/me/api-key/rotate HTTP/1.1\r\nHost: t\r\nX-API-Key: "
        + ann["api_key"].encode()
        + b"\r\nContent-Length: 0\r\n\r\n"
    )
    bad_body = (
        b"POST /api/v1/agent/memories HTTP/1.1\r\nHost: t\r\n"
        b"Transfer-Encoding: chunked\r\n\r\nzz\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(rotate + bad_body)
        answers = b""
        while chunk := sock.recv(65536):
            answers += chunk
    assert answers.startswith(b"HTTP/1.1 200 OK\r\n"), answers
