"""SQLite keeps the answers of searches being paged in a file of their own (`sqlite_kept.py`):
keeping one commits nothing to the database, so its reading connections keep their pages."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from mnemos.config import Settings
from mnemos.domain.ids import utcnow
from mnemos.storage import migrate
from mnemos.storage.sqlite import SqliteStore
from mnemos.storage.sqlite_kept import SUFFIX


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "k.db"
    migrate(Settings(database_url=f"sqlite:///{path}"))
    return path


@pytest.fixture
def store(database: Path) -> Iterator[SqliteStore]:
    opened = SqliteStore(f"sqlite:///{database}")
    yield opened
    opened.close()


def test_keeping_an_answer_commits_nothing_to_the_database(
    database: Path, store: SqliteStore
) -> None:
    # `data_version` changes for a connection when another one commits to the database: the
    # moment SQLite drops that connection's cached pages.
    watcher = sqlite3.connect(database)
    try:
        before = watcher.execute("PRAGMA data_version").fetchone()[0]
        ranked = [(uuid.uuid4(), 0.5), (uuid.uuid4(), 0.25)]
        store.keep_search("s1", ranked, utcnow() + timedelta(minutes=5), "agent:a", 10)
        assert watcher.execute("PRAGMA data_version").fetchone()[0] == before
    finally:
        watcher.close()
    assert store.kept_search("s1") == ranked
    assert (database.parent / (database.name + SUFFIX)).exists()


def test_every_process_reads_the_answers_another_kept(database: Path, store: SqliteStore) -> None:
    other = SqliteStore(f"sqlite:///{database}")  # another server process on the database
    try:
        assert other.kept_search("s1") is None  # nothing kept yet: no file, no table
        ranked = [(uuid.uuid4(), 0.75)]
        other.keep_search("s1", ranked, utcnow() + timedelta(minutes=5), "agent:a", 10)
        assert store.kept_search("s1") == ranked
        expired = [(uuid.uuid4(), 0.5)]
        store.keep_search("s2", expired, utcnow() - timedelta(seconds=1), "agent:a", 10)
        assert other.kept_search("s2") is None
    finally:
        other.close()


def test_each_caller_keeps_a_bounded_number_in_the_file(store: SqliteStore) -> None:
    later = utcnow() + timedelta(minutes=5)
    for number in range(4):
        store.keep_search(f"s{number}", [(uuid.uuid4(), 0.5)], later, "agent:a", 2)
    store.keep_search("b", [(uuid.uuid4(), 0.5)], later, "agent:b", 2)
    kept = [name for name in ("s0", "s1", "s2", "s3", "b") if store.kept_search(name)]
    assert kept == ["s2", "s3", "b"]


def test_an_answer_that_cannot_be_kept_is_as_one_lost_in_a_crash(
    database: Path, store: SqliteStore, caplog: pytest.LogCaptureFixture
) -> None:
    # A directory where the file should be: SQLite cannot open it (as a file left by another
    # user, or a read-only mount). Keeping logs and goes on; reading finds nothing (the
    # cursor then says "expired"); neither fails the search it serves with 503.
    (database.parent / (database.name + SUFFIX)).mkdir()
    with caplog.at_level("WARNING", logger="mnemos"):
        store.keep_search("s1", [(uuid.uuid4(), 0.5)], utcnow() + timedelta(minutes=5), "a", 10)
        assert store.kept_search("s1") is None
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "a search's kept answer could not be kept",
        "a search's kept answer could not be read",
    ]
