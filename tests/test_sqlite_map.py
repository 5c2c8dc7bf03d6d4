"""SQLite's read connections map as much of the database file as SQLite allows (sem11)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from mnemos.config import Settings
from mnemos.storage import migrate, open_store
from mnemos.storage.sqlite import SqliteStore


def test_reads_map_as_much_of_the_file_as_sqlite_allows(tmp_path: Path) -> None:
    """A search reads vectors and rows all over the file: past the map each page is copied
    through the connection's small cache. 1 GiB left most of a 1,000,000-memory file
    (3 GB and more) out; every read connection now maps what SQLite's build allows."""
    probe = sqlite3.connect(tmp_path / "probe.db")
    largest = probe.execute("PRAGMA mmap_size = 1099511627776").fetchone()[0]
    probe.close()
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'mnemos.db'}")
    migrate(settings)
    store = open_store(settings)
    assert isinstance(store, SqliteStore)
    try:
        with store._read() as conn:
            mapped = conn.exec_driver_sql("PRAGMA mmap_size").scalar()
    finally:
        store.close()
    assert mapped == largest
