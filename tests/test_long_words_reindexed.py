"""A memory stored before words were cut to `MAX_WORD_BYTES` (review18, finding 8) is indexed
as one stored now, on both backends: rows in the database by migration 0025, rows of an older
export file by `mnemos import`; both cut with `domain/search.py` `recut`."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from fastapi.testclient import TestClient

from mnemos.config import Settings
from mnemos.domain import search
from mnemos.domain.search import index_text, recut
from mnemos.storage import alembic_config, migrate
from mnemos.storage.base import Store
from mnemos.storage.postgres import driver_url
from mnemos.storage.sql import SqlStore
from mnemos.storage.transfer_import import import_database
from tests.test_transfer import client_on, dump, fresh
from tests.world import World, memory_body

AGENT = "/api/v1/agent/memories"
LONG = "㌀" * 200  # NFKD: 800 characters, 2,400 bytes (over PostgreSQL's 2,047)
CONTENTS = [
    f"the dump {LONG} tail",
    "a" * 2_047 + " " + "b" * 2_048 + " é" * 3,
    "x" + "€" * 700 + " short " + "ü" * 1_100,  # 3-byte and decomposed characters, cut inside
    "nothing long here",
]


def _uncut(content: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """What `index_text` stored before words were cut."""
    with monkeypatch.context() as patch:
        patch.setattr(search, "_cut", lambda word: word)
        patch.setattr(search, "_SHORT_WORD", 0)
        return index_text(content)


def test_recut_turns_an_old_index_text_into_todays(monkeypatch: pytest.MonkeyPatch) -> None:
    for content in CONTENTS:
        old = _uncut(content, monkeypatch)
        assert recut(old) == index_text(content)
        assert recut(index_text(content)) == index_text(content)
    assert _uncut(CONTENTS[0], monkeypatch) != index_text(CONTENTS[0])  # the test has teeth


def _found(client: TestClient, headers: dict[str, str], query: str) -> list[str]:
    answer = client.get(AGENT, params={"content_query": query}, headers=headers)
    assert answer.status_code == 200, answer.text
    return [memory["id"] for memory in answer.json()["data"]]


def test_a_memory_stored_before_the_cut_is_found_by_its_long_word_after_the_migration(
    client: TestClient,
    store: Store,
    world: World,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rows are made as the code before the cut stored them (whole words in `search_text`):
    PostgreSQL's index then lacks each long word (not even a prefix of it finds the memory),
    SQLite's holds it whole (a prefix finds it; a phrase with the cut word, as a query of a
    NFKD-expanding word is cut, never does). After `mnemos migrate` both find them as memories
    stored today."""
    bot = world.agent(world.user("Ann", "Acme"))
    ids = [_stored(client, bot.headers, content) for content in CONTENTS]
    _as_before_the_cut(store, monkeypatch)

    url = settings.resolved_database_url()
    command.downgrade(alembic_config(url), "0024_vector_chunk_bits_first")
    migrate(settings)

    assert _texts(url) == {content: index_text(content) for content in CONTENTS}
    _all_found(client, bot.headers, ids)


def test_an_export_from_before_the_cut_imports_as_cut(
    client: TestClient,
    store: Store,
    world: World,
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bot = world.agent(world.user("Ann", "Acme"))
    ids = [_stored(client, bot.headers, content) for content in CONTENTS]
    _as_before_the_cut(store, monkeypatch)
    old = dump(database_url)
    assert _uncut(CONTENTS[0], monkeypatch).encode() in old

    backend = "postgresql" if database_url.startswith("postgres") else "sqlite"
    with fresh(backend, tmp_path / "again") as again:
        import_database(again, [*io.BytesIO(old)])
        assert _texts(again) == {content: index_text(content) for content in CONTENTS}
        with client_on(again) as moved:
            _all_found(moved, bot.headers, ids)


def _stored(client: TestClient, headers: dict[str, str], content: str) -> str:
    stored = client.post(AGENT, json=memory_body(content), headers=headers)
    assert stored.status_code == 201, stored.text
    return str(stored.json()["data"]["id"])


def _as_before_the_cut(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each memory's `search_text` as the code before the cut stored it (whole words)."""
    assert isinstance(store, SqlStore)
    with store._write() as conn:
        for content in CONTENTS:
            conn.execute(
                sa.text("UPDATE memories SET search_text = :old WHERE content = :content"),
                {"old": _uncut(content, monkeypatch), "content": content},
            )


def _texts(url: str) -> dict[str, str]:
    engine = sa.create_engine(driver_url(url))
    try:
        with engine.connect() as conn:
            query = sa.text("SELECT content, search_text FROM memories")
            return {str(row[0]): str(row[1]) for row in conn.execute(query)}
    finally:
        engine.dispose()


def _all_found(client: TestClient, headers: dict[str, str], ids: list[str]) -> None:
    assert _found(client, headers, f'"{LONG} tail"') == [ids[0]]  # the cut word, then
    assert _found(client, headers, LONG[:2]) == [ids[0]]
    assert _found(client, headers, "b" * 500) == [ids[1]]
    assert _found(client, headers, "ü" * 500) == [ids[2]]
