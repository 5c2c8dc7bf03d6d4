"""SQLite group commit: writers that queue up share one COMMIT, and nobody hears "saved" early."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from mnemos.config import Settings
from mnemos.domain.ids import utcnow
from mnemos.domain.models import Scope
from mnemos.storage import migrate
from mnemos.storage.sql_base import driver_connection
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


def test_a_lone_writer_runs_without_a_savepoint(store: SqliteStore) -> None:
    """A store alone in its batch runs in the transaction itself: no SAVEPOINT and RELEASE."""
    statements: list[str] = []
    sa.event.listen(
        store._write_engine,
        "before_cursor_execute",
        lambda _c, _cur, sql, *_: statements.append(sql.split()[0].upper()),
    )
    store.insert_memory(memory(Scope.ORGANIZATION, None, uuid.uuid4()))
    assert "INSERT" in statements
    assert "SAVEPOINT" not in statements and "RELEASE" not in statements


def test_a_failing_first_writer_rolls_back_only_its_own_work(store: SqliteStore) -> None:
    """The batch's first block has no SAVEPOINT: its failure rolls back its transaction, which
    holds nothing else; the writers queued behind it commit theirs, and so does the next."""

    def fail(conn: Any) -> None:
        insert(conn)
        raise ValueError("this block fails")

    outcomes = queue_behind_a_slow_writer(store, [insert, insert], first_body=fail)
    assert isinstance(outcomes[0], ValueError)
    assert outcomes[1:] == [None, None]
    assert count(store) == 2
    with pytest.raises(ValueError), store._write() as conn:
        fail(conn)
    assert count(store) == 2
    store.insert_memory(memory(Scope.ORGANIZATION, None, uuid.uuid4()))
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


def commit_levels(store: SqliteStore) -> list[int]:
    """The `synchronous` level each COMMIT of the writer connection runs at (2: FULL, the
    fsync; 1: NORMAL, none)."""
    return commit_levels_of(store._write_engine)


def commit_levels_of(engine: sa.Engine) -> list[int]:
    seen: list[int] = []

    def level(conn: Any) -> None:
        seen.append(driver_connection(conn).execute("PRAGMA synchronous").fetchone()[0])

    sa.event.listen(engine, "commit", level)
    return seen


def test_a_kept_search_commits_without_the_fsync_beside_the_database(store: SqliteStore) -> None:
    """A search's kept answer is a cache (lost in a crash, its cursor says "expired"): it
    commits in a file of its own (`sqlite_kept.py`) without the fsync, and the database's
    writes stay durable."""
    levels = commit_levels(store)
    assert store._kept_file is not None
    writer, _ = store._kept_file._opened()
    kept_levels = commit_levels_of(writer)
    ranked = [(uuid.uuid4(), 0.5)]
    store.keep_search("s1", ranked, utcnow() + timedelta(minutes=5), "caller", 10)
    store.insert_memory(memory(Scope.ORGANIZATION, None, uuid.uuid4()))
    assert kept_levels == [1] and levels == [2]
    assert store.kept_search("s1") == ranked and count(store) == 1


def test_a_lazy_write_never_shares_a_durable_batch(store: SqliteStore) -> None:
    """A lazy writer queued behind an open batch commits that batch (durably) first, then its
    own transaction alone."""
    levels = commit_levels(store)
    release = threading.Event()
    failures: list[BaseException] = []

    def durable() -> None:
        try:
            with store._write() as conn:
                release.wait(10)
                insert(conn)
        except BaseException as exc:  # noqa: BLE001 - recorded for the test
            failures.append(exc)

    def lazy() -> None:
        try:
            with store._lazy_write() as conn:
                insert(conn)
        except BaseException as exc:  # noqa: BLE001 - recorded for the test
            failures.append(exc)

    first = threading.Thread(target=durable)
    first.start()
    while store._writes._batch is None:
        time.sleep(0.001)
    second = threading.Thread(target=lazy)
    second.start()
    waited = time.monotonic()
    while store._writes._waiting < 1 and not failures and time.monotonic() - waited < 10:
        time.sleep(0.001)
    release.set()
    for thread in (first, second):
        thread.join(10)
    assert failures == []
    assert levels == [2, 1] and count(store) == 2
