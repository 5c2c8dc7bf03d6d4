"""`mnemos backup`: a consistent copy of a SQLite database, taken while it serves.

SQLite's online backup API copies the database under one read transaction, in one step: in WAL
mode a reader never stops writers, and what lands in the file is the committed state the step
began with. (In several steps, a write between two of them starts the copy over from its first
page: a server that commits more often than the copy takes would never get its backup.) The
copy is then checked with `PRAGMA integrity_check` before it is kept. (PostgreSQL: pg_dump, see
docs/operations.md.)
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from sqlalchemy.engine import make_url

from mnemos.errors import MnemosError

ALL_PAGES = -1  # the backup API's "every page in one step"


class BackupFailed(MnemosError):
    status = 500
    code = "backup_failed"


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL; None for another backend (or an in-memory database)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def integrity(path: Path) -> str:
    """SQLite's verdict on a database file: 'ok' when sound."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


DATABASE_FILES = ("", "-wal", "-shm", "-journal", ".searches", ".searches-wal", ".searches-shm")
"""A SQLite database's own files: itself, its journals, its kept search answers and theirs."""


def is_the_database(out: Path, source: Path) -> bool:
    """Whether `out` names `source` or one of its files (by path, or by inode: a link): what no
    command may write its output over (`backup`, `export`, `admin export-subject`)."""
    mine = [source.with_name(source.name + suffix) for suffix in DATABASE_FILES]
    if out.resolve() in {path.resolve() for path in mine}:
        return True
    return out.exists() and any(path.exists() and os.path.samefile(out, path) for path in mine)


def is_a_file_of(out: Path, url: str) -> bool:
    """Whether `out` is the SQLite database of `url` or one of its files (never, on PostgreSQL:
    its files are not the command's to name)."""
    source = sqlite_path(url)
    return source is not None and is_the_database(out, source)


def backup_sqlite(source: Path, out: Path) -> dict[str, object]:
    """Copy `source` into `out` (written beside it, then renamed once verified)."""
    if not source.exists():
        raise BackupFailed(f"No database file at {source}")
    if is_the_database(out, source):
        raise BackupFailed(
            "The backup would replace the database it copies (or one of its own files): "
            "choose another --out",
            {"out": str(out)},
        )
    if not out.parent.is_dir():
        raise BackupFailed(f"No directory {out.parent} to write the backup in", {"out": str(out)})
    partial = out.with_name(out.name + ".partial")
    try:
        partial.unlink(missing_ok=True)
        src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
        dst = sqlite3.connect(partial)
        try:
            src.backup(dst, pages=ALL_PAGES)
            dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        finally:
            dst.close()
            src.close()
    except (OSError, sqlite3.Error) as exc:  # a directory not writable, a full disk
        partial.unlink(missing_ok=True)
        raise BackupFailed(f"The copy could not be written: {exc}", {"out": str(out)}) from None
    verdict = integrity(partial)
    if verdict != "ok":
        partial.unlink(missing_ok=True)
        raise BackupFailed("The copy failed its integrity check", {"integrity_check": verdict})
    os.replace(partial, out)  # the copy's pages are on disk: SQLite synced them at its commit
    sync_directory(out.parent)
    return {"ok": True, "out": str(out), "bytes": out.stat().st_size, "integrity_check": verdict}


def sync_directory(path: Path) -> None:
    """Make the renames in directory `path` durable: until its entry is written, a power loss
    may take the directory back to before `os.replace`, after `mnemos backup` answered "ok"
    (a kill cannot show it). Nothing where a directory cannot be opened (Windows)."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
