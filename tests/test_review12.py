"""Fourth hostile review (review12): findings in this session's new code.

Each test states the behaviour the finding asks for and failed, when written, for the finding's
reason. The finding about bodies read before any slot is taken is tested with the shares
(`tests/api/test_tenant_share.py`, "slow uploads")."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from mnemos.storage.base import Store
from tests.test_review11 import _backdate
from tests.test_rights_admin import mnemos
from tests.world import World, memory_body

BASE = "/api/v1/agent/memories"


def refusal_code(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1 and done.stderr, done
    line = done.stderr.strip().splitlines()[-1]
    try:
        code: str = json.loads(line)["error"]["code"]
    except ValueError:
        return f"not a refusal: {line}"
    return code


RETENTION = ("admin", "set-retention", "--org", str(uuid.uuid4()), "--system", "working")


def test_an_empty_file_is_not_taken_for_a_database(tmp_path: Path) -> None:
    empty = tmp_path / "mnemos.db"
    empty.touch()  # a copy that failed, a `touch`, a file truncated by a full disk
    done = mnemos(f"sqlite:///{empty}", *RETENTION, "--days", "3")
    assert refusal_code(done) == "database_missing"
    assert empty.stat().st_size == 0


@pytest.mark.skipif(not os.environ.get("MNEMOS_TEST_POSTGRES_URL"), reason="no PostgreSQL")
def test_a_postgres_database_that_is_not_there_is_refused_as_missing() -> None:
    server = make_url(os.environ["MNEMOS_TEST_POSTGRES_URL"])
    missing = server.set(database="review12_no_such_database")
    done = mnemos(missing.render_as_string(hide_password=False), *RETENTION, "--days", "3")
    assert refusal_code(done) == "database_missing"


def test_a_0024_stopped_during_its_copy_can_be_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import alembic.op

    from mnemos.config import load_settings
    from mnemos.storage import migrate

    settings = load_settings(database_url=f"sqlite:///{tmp_path / 'mnemos.db'}")
    migrate(settings, "0023_request_id_length")
    real = alembic.op.execute

    def stopped_during_copy(sql: Any, *args: Any, **kwargs: Any) -> Any:
        if "INSERT INTO vector_chunks_new" in str(sql):
            raise OSError("database or disk is full")  # or a kill, during the 10 s copy at 1M
        return real(sql, *args, **kwargs)

    monkeypatch.setattr(alembic.op, "execute", stopped_during_copy)
    with pytest.raises(OSError):
        migrate(settings)
    monkeypatch.setattr(alembic.op, "execute", real)
    migrate(settings)  # the operator runs it again


def test_an_expired_memory_of_a_deleted_agent_can_be_brought_back(
    client: TestClient, world: World, store: Store
) -> None:
    import sqlalchemy as sa

    from mnemos.domain.history import by_operator
    from mnemos.storage.schema import memory_history

    ann = world.user("Ann", "r12-retention")
    bot = world.agent(ann)
    body = memory_body("release checklist", scope="organization", system="working")
    answer = client.post(BASE, json={**body, "type": "episodic"}, headers=bot.headers)
    assert answer.status_code == 201, answer.text
    memory = uuid.UUID(answer.json()["data"]["id"])
    _backdate(store, str(memory), days=10)
    services = client.app.state.services  # type: ignore[attr-defined]
    org = uuid.UUID(world.org("r12-retention"))
    services.retention.set(org, "working", 1)  # meant 100
    assert services.retention.expire() == 1
    services.retention.set(org, "working", 0)  # the operator lifts the wrong policy
    # Meanwhile the agent is retired; the organization's memory stays (its source is removed).
    gone = client.delete(f"/api/v1/me/agents/{bot.id}", headers=ann.headers)
    assert gone.status_code == 200, gone.text
    events = sa.select(memory_history.c.event).where(memory_history.c.memory_id == memory)
    with store._read() as conn:  # type: ignore[attr-defined]
        assert list(conn.execute(events.order_by(memory_history.c.pk)).scalars()) == [
            "created",
            "expired",
            "source_removed",
        ]
    assert services.retention.restore(org, "working", by_operator()) == 1
