"""SQLite group commit: writers that queue up share one COMMIT, and nobody hears "saved" early."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from mnemos.config import Settings
from mnemos.domain.models import Scope
from mnemos.storage import migrate
from mnemos.storage.sqlite import SqliteStore
from tests.domain.test_rules import memory


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    url = f"sqlite:///{tmp_path / 'g.db'}"
    migrate(Settings(database_url=url))
    opened = SqliteStore(url)
    yield opened
    opened.close()


def count(store: SqliteStore) -> int:
    with store._read() as conn:
        return int(conn.exec_driver_sql("SELECT count(*) FROM memories").scalar_one())


def commits(store: SqliteStore) -> list[int]:
    seen: list[int] = []
    sa.event.listen(store._write_engine, "commit", lambda _conn: seen.append(1))
    return seen


def queue_behind_a_slow_writer(
    store: SqliteStore, bodies: list[Any], first_body: Any = None
) -> list[BaseException | None]:
    """Writer 0 holds its turn until every other writer waits for one, then all proceed."""
    outcomes: list[BaseException | None] = [None] * (len(bodies) + 1)
    release = threading.Event()

    def run(index: int, body: Any) -> None:
        try:
            with store._write() as conn:
                if index == 0:
                    release.wait(10)
                body(conn)
        except BaseException as exc:  # noqa: BLE001 - recorded for the test
            outcomes[index] = exc

    first = threading.Thread(target=run, args=(0, first_body or insert))
    first.start()
    while store._writes._batch is None:
        time.sleep(0.001)
    others = [threading.Thread(target=run, args=(i + 1, b)) for i, b in enumerate(bodies)]
    for thread in others:
        thread.start()
    while store._writes._waiting < len(bodies):
        time.sleep(0.001)
    release.set()
    for thread in [first, *others]:
        thread.join(10)
    return outcomes


def insert(conn: Any) -> None:
    from mnemos.storage.rows import memory_values
    from mnemos.storage.schema import memories

    conn.execute(memories.insert().values(**memory_values(memory(Scope.ORGANIZATION, None, None))))


def test_queued_writers_share_one_commit(store: SqliteStore) -> None:
    seen = commits(store)
    outcomes = queue_behind_a_slow_writer(store, [insert, insert, insert])
    assert outcomes == [None] * 4
    assert count(store) == 4
    assert len(seen) == 1


def test_a_lone_writer_commits_at_once(store: SqliteStore) -> None:
    seen = commits(store)
    for _ in range(3):
        store.insert_memory(memory(Scope.ORGANIZATION, None, uuid.uuid4()))
    assert count(store) == 3 and len(seen) == 3


def test_a_failing_writer_rolls_back_only_its_own_work(store: SqliteStore) -> None:
    def fail(conn: Any) -> None:
        insert(conn)
        raise ValueError("this block fails")

    outcomes = queue_behind_a_slow_writer(store, [insert, fail, insert])
    assert outcomes[0] is None and outcomes[1] is None and outcomes[3] is None
    assert isinstance(outcomes[2], ValueError)
    assert count(store) == 3


def test_a_failed_commit_fails_every_writer_of_the_batch(store: SqliteStore) -> None:
    def refuse(_conn: Any) -> None:
        raise sa.exc.OperationalError("COMMIT", {}, Exception("disk I/O error"))

    sa.event.listen(store._write_engine, "commit", refuse)
    outcomes = queue_behind_a_slow_writer(store, [insert, insert])
    sa.event.remove(store._write_engine, "commit", refuse)
    assert all(outcome is not None for outcome in outcomes)
    assert {type(outcome).__name__ for outcome in outcomes} == {"StorageUnavailable"}
    assert count(store) == 0
    store.insert_memory(memory(Scope.ORGANIZATION, None, uuid.uuid4()))  # and it recovers
    assert count(store) == 1
