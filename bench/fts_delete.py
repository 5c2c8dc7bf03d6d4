"""SQLite drivers and FTS5 delete modes side by side, on copies of one bench database.

    python -m bench.fts_delete --database /tmp/rights-200k.db --person UUID --rounds 2

The database is one `bench.rights --keep-template sqlite=PATH` loaded (its person's UUID is in the
keys file beside the template). Each variant works on a fresh copy, through the DB-API alone
(the same pragmas as the store):

- `stdlib`: Python's `sqlite3` (the system's SQLite), the index as it is (the 'delete' command);
- `sqlean`: `sqlean.py`'s SQLite, the same index;
- `sqlean-cd`: `sqlean.py`, the index recreated with `contentless_delete=1` (`statements`: the
  migration that was evaluated and not kept, docs/decisions.md) and its triggers deleting by rowid.

Needs `pip install sqlean.py` (not a dependency of Mnemos).

and times: deleting every memory about the person (one statement and its COMMIT: the triggers'
work is the full-text delete), then inserting 10,000 memories in transactions of 1,000 (the insert
trigger), then 40 searches (prefixes and words of the bench's vocabulary, each its first 1,000
matches, and a bm25 top 10). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlean.dbapi2 as sqlean

from mnemos.storage.sqlite import scope_tokens_sql

OPTIONS = "content='', prefix='3 4', tokenize='unicode61 remove_diacritics 0'"
UPDATED = "search_text, source_agent_id, organization_id, subject_id, chat_room_id"


def _index(row: str) -> str:
    return (
        "INSERT INTO memories_fts(rowid, search_text, scope) "
        f"VALUES ({row}.pk, {row}.search_text, {scope_tokens_sql(row)});"
    )


def _unindex(row: str, *, by_rowid: bool) -> str:
    if by_rowid:
        return f"DELETE FROM memories_fts WHERE rowid = {row}.pk;"
    return (
        "INSERT INTO memories_fts(memories_fts, rowid, search_text, scope) "
        f"VALUES ('delete', {row}.pk, {row}.search_text, {scope_tokens_sql(row)});"
    )


def statements(*, contentless_delete: bool) -> list[str]:
    """The SQL that recreates and refills the index, with or without the option."""
    options = f"{OPTIONS}, contentless_delete=1" if contentless_delete else OPTIONS
    unindex = _unindex("old", by_rowid=contentless_delete)
    return [
        "DROP TRIGGER IF EXISTS memories_fts_ad",
        "DROP TRIGGER IF EXISTS memories_fts_au",
        "DROP TABLE IF EXISTS memories_fts",
        f"CREATE VIRTUAL TABLE memories_fts USING fts5(search_text, scope, {options})",
        "INSERT INTO memories_fts(rowid, search_text, scope) "
        f"SELECT pk, search_text, {scope_tokens_sql('memories')} FROM memories",
        f"CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN {unindex} END",
        f"CREATE TRIGGER memories_fts_au AFTER UPDATE OF {UPDATED} ON memories BEGIN "
        f"{unindex} {_index('new')} END",
    ]


INSERTED = 10_000
PER_TRANSACTION = 1_000
WORDS = ["harbor", "ledger", "quokkabanana", "river", "signal", "window", "garden", "market"]
PREFIXES = ["har", "led", "riv", "sig", "win", "gar", "mar", "quok"]

Connect = Callable[[str], Any]
VARIANTS: dict[str, tuple[Connect, bool]] = {
    "stdlib": (lambda path: sqlite3.connect(path, isolation_level=None), False),
    "sqlean": (lambda path: sqlean.connect(path, isolation_level=None), False),
    "sqlean-cd": (lambda path: sqlean.connect(path, isolation_level=None), True),
}


def opened(connect: Connect, path: Path) -> Any:
    conn = connect(str(path))
    for pragma in (
        "journal_mode=WAL",
        "synchronous=FULL",
        "foreign_keys=ON",
        "mmap_size=1073741824",
    ):
        conn.execute(f"PRAGMA {pragma}")
    return conn


def timed(run: Callable[[], Any]) -> float:
    started = time.perf_counter()
    run()
    return round(time.perf_counter() - started, 3)


def erase(conn: Any, person: str) -> int:
    conn.execute("BEGIN IMMEDIATE")
    count = conn.execute("DELETE FROM memories WHERE subject_id = ?", (person,)).rowcount
    conn.execute("COMMIT")
    return int(count)


def insert(conn: Any) -> None:
    columns = [row[1] for row in conn.execute("PRAGMA table_info(memories)") if row[1] != "pk"]
    chosen = ", ".join("lower(hex(randomblob(16)))" if c == "id" else c for c in columns)
    names = ", ".join(columns)
    first = conn.execute("SELECT min(pk) FROM memories").fetchone()[0]
    for start in range(0, INSERTED, PER_TRANSACTION):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            f"INSERT INTO memories ({names}) SELECT {chosen} FROM memories "
            "WHERE pk >= ? ORDER BY pk LIMIT ?",
            (first + start, PER_TRANSACTION),
        )
        conn.execute("COMMIT")


def search(conn: Any) -> int:
    found = 0
    for term in [f'"{w}"' for w in WORDS] + [f'"{p}"*' for p in PREFIXES]:
        expression = "{search_text} : (" + term + ")"
        found += conn.execute(
            "SELECT count(*) FROM (SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? "
            "LIMIT 1000)",
            (expression,),
        ).fetchone()[0]
        found += len(
            conn.execute(
                "SELECT rowid, bm25(memories_fts, 1.0, 0.0) AS s FROM memories_fts "
                "WHERE memories_fts MATCH ? ORDER BY s LIMIT 10",
                (expression,),
            ).fetchall()
        )
    return found


def variant(name: str, source: Path, person: str, tmp: Path) -> dict[str, Any]:
    connect, contentless = VARIANTS[name]
    copy = tmp / f"{name}.db"
    shutil.copy(source, copy)
    conn = opened(connect, copy)
    result: dict[str, Any] = {"sqlite": conn.execute("SELECT sqlite_version()").fetchone()[0]}
    try:
        if contentless:

            def migrate() -> None:
                conn.execute("BEGIN IMMEDIATE")
                for statement in statements(contentless_delete=True):
                    conn.execute(statement)
                conn.execute("COMMIT")

            result["migration_seconds"] = timed(migrate)
        erased: list[int] = []
        result["erase_seconds"] = timed(lambda: erased.append(erase(conn, person)))
        result["erased"] = erased[0]
        result["search_seconds_after_erase"] = timed(lambda: search(conn))
        result["insert_seconds"] = timed(lambda: insert(conn))
        result["search_seconds_after_insert"] = timed(lambda: search(conn))
        result["hits_of_the_erased_word"] = conn.execute(
            "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH 'quokkabanana'"
        ).fetchone()[0]
    finally:
        conn.close()
        copy.unlink()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database", type=Path, required=True)
    parser.add_argument("--person", required=True, help="the person's UUID")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--variant", action="append", choices=list(VARIANTS))
    args = parser.parse_args()
    person = args.person.replace("-", "")  # SQLite keeps a UUID as its 32 hex digits
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-fts-delete-"))
    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        for _ in range(args.rounds):
            for name in args.variant or list(VARIANTS):
                runs.setdefault(name, []).append(variant(name, args.database, person, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({"database": str(args.database), "runs": runs}, indent=1))  # noqa: T201


if __name__ == "__main__":
    main()
