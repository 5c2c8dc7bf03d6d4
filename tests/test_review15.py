"""Seventh hostile review (review15): findings in what landed since 431f6d4.

Each test states the behaviour the finding asks for and fails now for the finding's reason
(docs/decisions.md, "Seventh hostile review: findings (review15, 2026-12-05)")."""

from __future__ import annotations

import io
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.storage.postgres import driver_url
from mnemos.storage.schema import memories, memory_history
from mnemos.storage.transfer import export_database
from mnemos.storage.transfer_import import import_database
from tests.test_transfer import fresh
from tests.world import World, memory_body

BASE = "/api/v1/agent/memories"


# --- PostgreSQL pings a pooled connection only after a second idle ---------------------------


@pytest.mark.xfail(strict=True, reason="review15: a terminated pooled connection fails the next request")
def test_a_request_after_the_servers_connections_were_terminated_is_answered(
    client: TestClient, world: World, database_url: str
) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("PostgreSQL's pool")
    agent = world.agent(world.user("Ann", "r15-kill"))
    assert client.post(BASE, json=memory_body("one"), headers=agent.headers).status_code == 201
    admin = sa.create_engine(driver_url(database_url), poolclass=sa.pool.NullPool)
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


# --- import --merge passes over held memories with their history ------------------------------


def _dump(url: str) -> bytes:
    out = io.BytesIO()
    export_database(url, out)
    return out.getvalue()


@pytest.mark.xfail(strict=True, reason="review15: a merge adds history to a memory it holds")
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
    last_night = _dump(database_url)
    gone = client.delete(f"/api/v1/me/memories/{memory_id}", headers=ann.headers)
    assert gone.status_code == 204, gone.text
    today = _dump(database_url)

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
                events = conn.execute(
                    sa.select(memory_history.c.event).where(
                        memory_history.c.memory_id == memory_id
                    )
                ).scalars().all()
        finally:
            there.dispose()
    assert status == "active"
    assert "deleted" not in events, events
