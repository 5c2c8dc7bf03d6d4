"""Eighth hostile review (review16): findings in what landed since b8c5c2e.

Each test states the behaviour the finding asks for and failed, when written, for the finding's
reason; all are fixed (docs/decisions.md, "Eighth hostile review: what was fixed")."""

from __future__ import annotations

import io
import uuid
from pathlib import Path

import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.config import Settings
from mnemos.storage import open_store
from mnemos.storage.schema import memories, memory_history
from mnemos.storage.transfer_import import import_database
from tests.test_transfer import dump, fresh
from tests.world import World, memory_body

BASE = "/api/v1/agent/memories"


def deleted_in_a_copy(copied: bytes, memory_id: uuid.UUID, database_url: str, tmp: Path) -> bytes:
    """The export of another server's copy (`copied` imported into a fresh database of the same
    backend) after the memory was deleted there."""
    backend = "postgresql" if database_url.startswith("postgresql") else "sqlite"
    with fresh(backend, tmp / "copy") as copy:
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
        return dump(copy)


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

    theirs = deleted_in_a_copy(copied, memory_id, database_url, tmp_path)

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

    theirs = deleted_in_a_copy(copied, memory_id, database_url, tmp_path)

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
