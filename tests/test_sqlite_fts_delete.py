"""SQLite's full-text index after an erasure: no entry of an erased memory is left under any
word, prefix or scope token (read from the index itself, where a join to `memories` would hide
a stale entry), and the rest answer as before."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

from mnemos.config import Settings
from mnemos.domain.history import SERVER
from mnemos.domain.ids import utcnow, uuid7
from mnemos.domain.models import Erasure, Memory, MemoryType, Scope, Segment, Status, System
from mnemos.domain.search import parse_search
from mnemos.storage import migrate
from mnemos.storage.rows import memory_values
from mnemos.storage.schema import memories
from mnemos.storage.sqlite import SqliteStore, fts5_query

PERSON = uuid.uuid4()
OTHER = uuid.uuid4()
TENANT = uuid.uuid4()
TEXTS = [
    "harbor lights over the quokkabanana pier",
    "ledger of the harbor master",
    "quokkabanana smoothies every monday",
    "river signal at dawn",
    "the harvest market opens early",
    "signal flags and harbor charts",
]
QUERIES = ["harbor", "har", "quokkabanana", "quo", "signal", "sig", "river", "market", "charts"]


def _memory(content: str, subject: uuid.UUID) -> Memory:
    now = utcnow()
    return Memory(
        id=uuid7(),
        content=content,
        thought=None,
        system=System.LONG_TERM,
        type=MemoryType.SEMANTIC,
        segment=Segment.USER,
        scope=Scope.SUBJECT,
        subject_id=subject,
        organization_id=TENANT,
        source_agent_id=uuid.uuid4(),
        chat_room_id=None,
        metadata={},
        status=Status.ACTIVE,
        inserted_at=now,
        updated_at=now,
        tenant_id=TENANT,
    )


def _expressions() -> dict[str, str]:
    found = {q: fts5_query(parse_search(q, 100)) for q in QUERIES}
    for subject in (PERSON, OTHER):
        found[f"subject {subject}"] = f'{{scope}} : "zzsub{subject.hex}"'
    return found


def answers(path: Path) -> dict[str, list[int]]:
    """Every query's rowids straight from the index (a stale entry would show here, where a
    join to `memories` would hide it)."""
    with sqlite3.connect(path) as db:
        return {
            name: sorted(
                row[0]
                for row in db.execute(
                    "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?", [expression]
                )
            )
            for name, expression in _expressions().items()
        }


def expected(path: Path) -> dict[str, list[int]]:
    """The same answers computed from the memories themselves."""
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT pk, search_text, subject_id FROM memories").fetchall()
    found: dict[str, list[int]] = {}
    for name in _expressions():
        if name.startswith("subject "):
            hex_id = uuid.UUID(name.removeprefix("subject ")).hex
            found[name] = sorted(pk for pk, _, subject in rows if subject == hex_id)
        else:
            found[name] = sorted(
                pk for pk, text, _ in rows if any(w.startswith(name) for w in text.split())
            )
    return found


def insert(store: SqliteStore, memory: Memory) -> None:
    row = memory_values(memory)
    with store._write() as conn:
        conn.execute(memories.insert().values(**row))
        store._note_subjects(conn, [row])


def test_an_erasure_leaves_no_index_entry_of_what_it_erased(tmp_path: Path) -> None:
    path = tmp_path / "erase.db"
    url = f"sqlite:///{path}"
    migrate(Settings(database_url=url))
    store = SqliteStore(url)
    for i, text in enumerate(TEXTS * 3):
        insert(store, _memory(text, PERSON if i % 3 else OTHER))
    erased = store.erase_subject(Erasure(uuid7(), PERSON, SERVER, utcnow()))
    store.close()
    assert erased == 12
    left = answers(path)
    assert left == expected(path)
    assert left[f"subject {PERSON}"] == []
    assert len(left["harbor"]) == 3  # the other person's, of nine
    with sqlite3.connect(path) as db:
        indexed = db.execute("SELECT count(*) FROM memories_fts_docsize").fetchone()[0]
        db.execute("INSERT INTO memories_fts(memories_fts) VALUES ('integrity-check')")
    assert indexed == 6
