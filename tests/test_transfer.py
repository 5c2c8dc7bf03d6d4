"""`mnemos export` / `mnemos import`: round trips across backends with the visibility world,
refusals (non-empty target, newer format, cut file) and --merge.

The source is the suite's database (each backend); the round trip goes to the other backend
and back (SQLite → PostgreSQL → SQLite, or PostgreSQL → SQLite → PostgreSQL; SQLite only when
no PostgreSQL is configured) and every actor must get the same answers at each stop, with the
same keys and even the same cursors.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain.search import index_text
from mnemos.storage import migrate, open_store, transfer_import
from mnemos.storage.base import Store
from mnemos.storage.schema import metadata
from mnemos.storage.sqlite import FTS_DEFAULT_HASHSIZE
from mnemos.storage.transfer import FORMAT_VERSION, TransferError, export_database
from mnemos.storage.transfer_import import import_database
from tests.api.test_visibility_world import AGENT, HUMAN, build
from tests.conftest import POSTGRES_URL
from tests.live.conftest import _database_for
from tests.world import Actor, World, memory_body


@contextmanager
def fresh(backend: str, tmp: Path) -> Iterator[str]:
    """A new, migrated database of `backend`, dropped afterwards."""
    tmp.mkdir(parents=True, exist_ok=True)
    databases = _database_for(backend, tmp)
    url = next(databases)
    try:
        migrate(Settings(database_url=url))
        yield url
    finally:
        databases.close()


@contextmanager
def client_on(url: str) -> Iterator[TestClient]:
    settings = Settings(database_url=url, sqlite_synchronous="NORMAL", rate_limit_per_minute=0)
    store = open_store(settings)
    try:
        with TestClient(create_app(settings, store)) as client:
            yield client
    finally:
        store.close()


def pages(client: TestClient, url: str, headers: dict[str, str], **params: Any) -> list[Any]:
    rows: list[Any] = []
    cursor = None
    while True:
        query = {**params, "limit": 50, "status": "all", **({"cursor": cursor} if cursor else {})}
        response = client.get(url, params=query, headers=headers)
        assert response.status_code == 200, response.text
        body = response.json()
        rows.append(body["data"])
        cursor = body["meta"]["next_cursor"]
        if cursor is None:
            return rows


def answers(
    client: TestClient, people: list[Actor], agents: list[Actor], cursors: dict[str, str]
) -> dict[str, Any]:
    """What every actor gets from the lists, a search and a cursor issued by the source."""
    found: dict[str, Any] = {}
    for agent in agents:
        found[f"agent {agent.id}"] = pages(client, AGENT, agent.headers)
        found[f"search {agent.id}"] = pages(client, AGENT, agent.headers, content_query="subject")
        if agent.organization_id:
            found[f"org {agent.id}"] = pages(client, AGENT, agent.headers, memory_scope="org")
        page = client.get(AGENT, params={"limit": 3}, headers=agent.headers).json()
        cursor = cursors.setdefault(agent.id, page["meta"]["next_cursor"])
        if cursor is not None:
            second = client.get(AGENT, params={"limit": 3, "cursor": cursor}, headers=agent.headers)
            assert second.status_code == 200, second.text
            found[f"cursor {agent.id}"] = second.json()
    for person in people:
        found[f"human {person.id}"] = pages(client, HUMAN, person.headers, scope="all")
        for path in ("/api/v1/me/profile", "/api/v1/me/agents"):
            response = client.get(path, headers=person.headers)
            assert response.status_code == 200, response.text
            found[f"{path} {person.id}"] = response.json()
    return found


def dump(url: str) -> bytes:
    out = io.BytesIO()
    export_database(url, out)
    return out.getvalue()


def rows_of(export: bytes) -> list[bytes]:
    """The row and trailer lines, sorted (text keys may sort differently per backend)."""
    return sorted(export.splitlines()[1:])


def test_round_trip_across_backends_keeps_every_answer_and_key(
    client: TestClient, world: World, store: Store, database_url: str, tmp_path: Path
) -> None:
    people, agents, model = build(client, world)
    org = uuid.UUID(people[0].organization_id or "")
    store.create_tuya_project("tuya-client-1", "s" * 32, org)
    store.bind_tuya_role(org, "94300123", uuid.UUID(agents[0].id))
    cursors: dict[str, str] = {}
    expected = answers(client, people, agents, cursors)
    first = dump(database_url)

    source = "postgresql" if database_url.startswith("postgres") else "sqlite"
    other = "sqlite" if source == "postgresql" else ("postgresql" if POSTGRES_URL else "sqlite")
    with ExitStack() as stack:
        there = stack.enter_context(fresh(other, tmp_path / "there"))
        import_database(there, [*io.BytesIO(first)])
        with client_on(there) as moved:
            assert answers(moved, people, agents, cursors) == expected
        second = dump(there)
        back = stack.enter_context(fresh(source, tmp_path / "back"))
        import_database(back, [*io.BytesIO(second)])
        with client_on(back) as returned:
            final = answers(returned, people, agents, cursors)
            assert final == expected
        for agent in agents:  # and they are what the reference model says
            listed = {row["id"] for page in final[f"agent {agent.id}"] for row in page}
            assert listed == model.agent_list(agent.id, "me", None, None)
            if agent.organization_id:
                listed = {row["id"] for page in final[f"org {agent.id}"] for row in page}
                assert listed == model.agent_list(agent.id, "org", None, None)
        assert rows_of(dump(back)) == rows_of(first)
        # A new memory on each moved database gets its own row (key sequences moved too).
        for url in (there, back):
            with client_on(url) as moved:
                response = moved.post(AGENT, json=memory_body("after"), headers=agents[0].headers)
                assert response.status_code == 201, response.text


def test_a_database_that_holds_data_is_refused_unless_merged(
    client: TestClient, world: World, database_url: str, tmp_path: Path
) -> None:
    people, _, _ = build(client, world)
    export = dump(database_url)
    with pytest.raises(TransferError, match="not empty"):
        import_database(database_url, [*io.BytesIO(export)])
    summary = import_database(database_url, [*io.BytesIO(export)], merge=True)
    as_json = summary.as_json()
    assert as_json["rows"] == 0
    assert as_json["skipped"] == len(export.splitlines()) - 2  # every row: all there already
    assert rows_of(dump(database_url)) == rows_of(export)

    # Merged into a database with other data: the new rows arrive, the existing are counted.
    with fresh("sqlite", tmp_path / "other") as other:
        with client_on(other) as other_client:
            World(other_client.app.state.services.store).user("Someone", "elsewhere")
        partial = _only(export, lambda line: b'"scope":"organization"' not in line)
        import_database(other, [*io.BytesIO(partial)], merge=True)
        summary = import_database(other, [*io.BytesIO(export)], merge=True)
        memories = summary.as_json()["tables"]["memories"]
        assert memories["rows"] > 0 and memories["skipped"] > 0
        assert memories["rows"] + memories["skipped"] == export.count(b'"t":"memories"')
        with client_on(other) as merged:
            for person in people:
                assert merged.get("/api/v1/me/profile", headers=person.headers).status_code == 200


def test_a_merged_person_whose_email_is_another_persons_is_refused_by_name(
    world: World, database_url: str, tmp_path: Path
) -> None:
    """A new person of the file whose email the target gives another person was skipped as
    if held, and the import then failed on their agent's foreign key, naming neither."""
    world.agent(world.user("Ann", "acme"))  # ann1@example.test, with an agent
    export = dump(database_url)
    with fresh("sqlite", tmp_path / "other") as other:
        with client_on(other) as other_client:
            World(other_client.app.state.services.store).user("Ann")  # ann1@..., another person
        before = dump(other)
        with pytest.raises(TransferError, match="same email") as refused:
            import_database(other, [*io.BytesIO(export)], merge=True)
        assert refused.value.details["table"] == "users"
        assert rows_of(dump(other)) == rows_of(before)  # nothing imported


def test_a_file_from_before_tenants_gets_them_on_import(
    client: TestClient, world: World, database_url: str, tmp_path: Path
) -> None:
    """A file written before revision 0018 (no `tenant_id`, no `subject_tenants`) imports, each
    row getting the tenant the migration would have given it: every answer is the same."""
    people, agents, _ = build(client, world)
    cursors: dict[str, str] = {}
    expected = answers(client, people, agents, cursors)
    export = dump(database_url)
    lines = export.splitlines()
    header = orjson.loads(lines[0]) | {"revision": "0017_search_owner"}
    old = [orjson.dumps(header)]
    for line in lines[1:-1]:
        record = orjson.loads(line)
        if record["t"] == "subject_tenants":
            continue
        record["r"].pop("tenant_id", None)
        old.append(orjson.dumps(record))
    assert b"tenant_id" not in b"\n".join(old)
    before = _only(b"\n".join([*old, lines[-1]]) + b"\n", lambda _: True)
    for merge in (False, True):
        with fresh("sqlite" if merge else "postgresql" if POSTGRES_URL else "sqlite",
                   tmp_path / f"old-{merge}") as there:  # fmt: skip
            import_database(there, [*io.BytesIO(before)], merge=merge)
            with client_on(there) as moved:
                assert answers(moved, people, agents, cursors) == expected
            if not merge:
                assert rows_of(dump(there)) == rows_of(export)
            else:  # the target numbers memories and history itself: their tenants are kept
                assert _tenants(dump(there)) == _tenants(export)


def _tenants(export: bytes) -> dict[tuple[Any, ...], Any]:
    """The tenant of each memory, history row and erasure of an export, by its natural key, and
    which tenants hold memories about whom."""
    found: dict[tuple[Any, ...], Any] = {}
    for line in export.splitlines()[1:-1]:
        record = orjson.loads(line)
        row = record["r"]
        if record["t"] == "subject_tenants":
            found[(record["t"], row["subject_id"], row["tenant_id"])] = True
        elif "tenant_id" in row:
            key = row["id"] if "id" in row else (row["memory_id"], row["event"], row["at"])
            found[(record["t"], key)] = row["tenant_id"]
    return found


def _only(export: bytes, keep: Callable[[bytes], bool]) -> bytes:
    """The export with only the rows `keep` keeps, and a trailer that counts them."""
    lines = export.splitlines()
    rows = [line for line in lines[1:-1] if keep(line)]
    counts: dict[str, int] = {}
    for line in rows:
        table = orjson.loads(line)["t"]
        counts[table] = counts.get(table, 0) + 1
    trailer = orjson.dumps({"end": True, "rows": counts})
    return b"\n".join([lines[0], *rows, trailer]) + b"\n"


def test_a_file_of_a_newer_format_is_refused(database_url: str) -> None:
    header = {"format": "mnemos-export", "version": FORMAT_VERSION + 1, "mnemos": "9.0"}
    with pytest.raises(TransferError, match="newer than this Mnemos reads"):
        import_database(database_url, [orjson.dumps(header) + b"\n", b'{"end":true,"rows":{}}\n'])
    with pytest.raises(TransferError, match="Not a Mnemos export"):
        import_database(database_url, [b"hello\n"])


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path in batches of 3 rows: a small world then takes the paths a big import
    takes (on PostgreSQL, one COPY per table across batches)."""
    monkeypatch.setattr(transfer_import, "BULK_BATCH_ROWS", 3)


@pytest.fixture(params=["whole", "small"])
def batches(request: pytest.FixtureRequest) -> str:
    """A test that takes it runs with the fast path's batches as they are, then small."""
    if request.param == "small":
        request.getfixturevalue("small_batches")
    return str(request.param)


@pytest.mark.usefixtures("batches")
def test_a_cut_file_is_refused_and_leaves_nothing(
    client: TestClient,
    world: World,
    database_url: str,
    tmp_path: Path,
) -> None:
    build(client, world)
    export = dump(database_url)
    backend = "postgresql" if database_url.startswith("postgres") else "sqlite"
    with fresh(backend, tmp_path / "cut") as target:
        for cut in (len(export) // 2, len(export) - 5, export.rindex(b"\n{") + 1):
            with pytest.raises(TransferError, match="nothing imported"):
                import_database(target, [*io.BytesIO(export[:cut])])
            engine = sa.create_engine(target.replace("postgresql://", "postgresql+psycopg://"))
            with engine.connect() as conn:
                for table in ("organizations", "users", "memories", "api_keys"):
                    count = conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar()
                    assert count == 0, (cut, table)
            engine.dispose()
        import_database(target, [*io.BytesIO(export)])  # the whole file still goes in


def test_a_column_or_table_this_version_does_not_know_is_refused(database_url: str) -> None:
    header = orjson.dumps({"format": "mnemos-export", "version": FORMAT_VERSION}) + b"\n"
    row = (
        orjson.dumps(
            {
                "t": "organizations",
                "r": {
                    "id": str(uuid.uuid4()),
                    "name": "x",
                    "memory_enabled": True,
                    "inserted_at": "2026-12-01T00:00:00+00:00",
                    "shoe_size": 9,
                },
            }
        )
        + b"\n"
    )
    trailer = b'{"end":true,"rows":{"organizations":1}}\n'
    with pytest.raises(TransferError, match="columns this Mnemos does not know"):
        import_database(database_url, [header, row, trailer])
    alien = b'{"t":"starships","r":{"id":1}}\n'
    with pytest.raises(TransferError, match="which this Mnemos does not know"):
        import_database(database_url, [header, alien, b'{"end":true,"rows":{"starships":1}}\n'])


def test_fifty_thousand_memories_import_with_progress_and_a_summary(
    client: TestClient, world: World, database_url: str, tmp_path: Path
) -> None:
    person = world.user("Ann", "acme")
    agent = world.agent(person)
    stored = client.post(AGENT, json=memory_body("template"), headers=agent.headers)
    assert stored.status_code == 201, stored.text
    lines = dump(database_url).splitlines()
    template = next(orjson.loads(line) for line in lines if b'"t":"memories"' in line)
    rows = [line for line in lines[1:-1] if b'"t":"memories"' not in line]
    for n in range(50_000):
        content = f"memory {n} about tea" + (" zebrafinch" if n == 31_337 else "")
        memory = {**template["r"], "pk": n + 1, "id": str(uuid.uuid4()), "content": content}
        memory["search_text"] = index_text(content)
        rows.append(orjson.dumps({"t": "memories", "r": memory}))
    file = tmp_path / "big.ndjson"
    file.write_bytes(_only(b"\n".join([lines[0], *rows, lines[-1]]), lambda _: True))

    backend = "postgresql" if database_url.startswith("postgres") else "sqlite"
    with fresh(backend, tmp_path / "big") as target:
        done = subprocess.run(
            [sys.executable, "-m", "mnemos", "import", str(file), "--progress"],
            capture_output=True,
            text=True,
            env={**os.environ, "MNEMOS_DATABASE_URL": target},
            timeout=600,
        )
        assert done.returncode == 0, done.stderr
        assert "100%" in done.stderr and "B/s" in done.stderr  # the bar, drawn to the end
        summary = json.loads(done.stdout)
        assert summary["tables"]["memories"] == {"rows": 50_000, "skipped": 0}
        assert summary["ok"] and summary["rows_per_second"] > 0
        with client_on(target) as moved:
            found = moved.get(AGENT, params={"content_query": "zebrafinch"}, headers=agent.headers)
            assert found.status_code == 200, found.text
            assert [row["content"] for row in found.json()["data"]] == [
                "memory 31337 about tea zebrafinch"
            ]
            page = moved.get(AGENT, params={"limit": 100}, headers=agent.headers).json()
            assert len(page["data"]) == 100 and page["meta"]["next_cursor"]
        # indexes, foreign keys and triggers set aside for the load are all back
        assert _catalog(target) == _catalog(database_url)
        if backend == "sqlite":  # FTS5 wrote the refill as one segment, and its default is back
            assert _fts_segments_and_hashsize(target) == (1, [FTS_DEFAULT_HASHSIZE])


def _fts_segments_and_hashsize(url: str) -> tuple[int, list[int]]:
    """SQLite: the FTS5 index's segments, and the pending-terms size its settings name."""
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        segments = conn.exec_driver_sql(
            "SELECT count(DISTINCT segid) FROM memories_fts_idx"
        ).scalar_one()
        sizes = conn.exec_driver_sql(
            "SELECT v FROM memories_fts_config WHERE k = 'hashsize'"
        ).scalars()
        found = int(segments), [int(size) for size in sizes]
    engine.dispose()
    return found


def _derived(url: str) -> dict[str, Any]:
    """What the set-aside triggers derive from memories: the embedding queue, and on SQLite the
    FTS index (every memory each indexed word and scope token finds), by memory id: `--merge`
    numbers the rows of `memories` itself (no foreign key points at its `pk`)."""
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as conn:
        found: dict[str, Any] = {
            "queue": sorted(
                conn.exec_driver_sql(
                    "SELECT m.id FROM vector_queue q JOIN memories m ON m.pk = q.memory_pk"
                ).scalars()
            )
        }
        if conn.dialect.name == "sqlite":
            words = {
                word
                for text in conn.exec_driver_sql("SELECT search_text FROM memories").scalars()
                for word in text.split()
            }
            for word in sorted(words):
                found[word] = sorted(
                    conn.exec_driver_sql(
                        "SELECT m.id FROM memories_fts f JOIN memories m ON m.pk = f.rowid "
                        "WHERE memories_fts MATCH ?",
                        (f'"{word}"',),
                    ).scalars()
                )
            found["tokens"] = sorted(
                conn.exec_driver_sql(
                    "SELECT m.id FROM memories_fts f JOIN memories m ON m.pk = f.rowid "
                    "WHERE f.scope MATCH 'zzorg*'"
                ).scalars()
            )
    engine.dispose()
    return found


def _catalog(url: str) -> list[tuple[Any, ...]]:
    """Indexes, triggers and constraints of the database, as its catalog describes them."""
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            query = "SELECT type, name, sql FROM sqlite_master ORDER BY type, name"
        else:
            query = (
                "SELECT 'index', indexname, indexdef FROM pg_indexes "
                "WHERE schemaname = current_schema() UNION ALL "
                "SELECT 'constraint', conname, pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE connamespace = current_schema()::regnamespace UNION ALL "
                "SELECT 'trigger', tgname, tgenabled::text FROM pg_trigger WHERE NOT tgisinternal "
                "ORDER BY 1, 2"
            )
        found = [tuple(row) for row in conn.exec_driver_sql(query)]
    engine.dispose()
    return found


@pytest.mark.usefixtures("batches")
def test_the_fast_import_answers_as_a_row_by_row_import(
    client: TestClient,
    world: World,
    database_url: str,
    tmp_path: Path,
) -> None:
    """Into an empty database indexes, keys and the FTS / embedding-queue triggers are set
    aside and rebuilt once (`transfer_bulk.py`), in whole or small batches; `--merge` inserts
    row by row with every trigger firing: both give the same answers, the same derived data,
    the same schema."""
    people, agents, _ = build(client, world)
    export = dump(database_url)
    backend = "postgresql" if database_url.startswith("postgres") else "sqlite"
    with fresh(backend, tmp_path / "fast") as fast, fresh(backend, tmp_path / "slow") as slow:
        schema = _catalog(fast)
        import_database(fast, [*io.BytesIO(export)])
        import_database(slow, [*io.BytesIO(export)], merge=True)  # empty: every row goes in
        assert _catalog(fast) == schema
        assert _derived(fast) == _derived(slow)
        assert _stored(fast) == _stored(slow)
        assert _fts_sound(fast)
        assert len(_derived(fast)["queue"]) == export.count(b'"t":"memories"')
        cursors: dict[str, str] = {}
        with client_on(slow) as row_by_row:
            expected = answers(row_by_row, people, agents, cursors)
        with client_on(fast) as loaded:
            assert answers(loaded, people, agents, cursors) == expected
            for agent in agents:  # full-text search finds each memory by its own words
                page = loaded.get(AGENT, params={"limit": 5}, headers=agent.headers).json()
                for row in page["data"]:
                    word = max(index_text(row["content"]).split(), key=len)
                    found = loaded.get(
                        AGENT, params={"content_query": word, "limit": 100}, headers=agent.headers
                    )
                    assert row["id"] in {hit["id"] for hit in found.json()["data"]}, word


def _stored(url: str) -> dict[str, list[str]]:
    """Every column of every memory and history row as stored (read back by its type), but
    their integer keys, which `--merge` may number itself: a null the fast path left out of a
    batch is stored as the null a row-by-row insert writes."""
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as conn:
        found = {
            name: sorted(
                repr(sorted((key, value) for key, value in row._mapping.items() if key != "pk"))
                for row in conn.execute(sa.select(metadata.tables[name]))
            )
            for name in ("memories", "memory_history")
        }
    engine.dispose()
    return found


def _fts_sound(url: str) -> bool:
    """SQLite: FTS5's own integrity check passes and it holds one entry per memory."""
    if not url.startswith("sqlite"):
        return True
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        conn.exec_driver_sql("INSERT INTO memories_fts(memories_fts) VALUES ('integrity-check')")
        counts = [
            conn.exec_driver_sql(f"SELECT count(*) FROM {name}").scalar_one()
            for name in ("memories_fts_docsize", "memories")
        ]
    engine.dispose()
    return counts[0] == counts[1]


BAD_VALUES = [
    ("organizations", "id", "not-a-uuid"),
    ("organizations", "inserted_at", "2026-13-01T00:00:00.000000+00:00"),
    ("organizations", "inserted_at", "yesterday"),
    ("organizations", "inserted_at", "2026-11-01T00:00:00.000000"),  # no offset: local time?
    ("memories", "inserted_at", "2026-11-01T00:00:00"),
    ("memories", "metadata", ["not", "an", "object"]),
    ("memories", "metadata", None),
    ("organizations", "memory_enabled", "yes"),
    ("organizations", "name", None),
    ("organizations", "name", 5),
    ("memories", "content", ["a list"]),
    ("memories", "id", "duplicate"),  # the id of another memory of the same tenant
    ("memories", "organization_id", 12),
    ("memories", "status", "bogus"),  # every list that holds it would answer 500
    ("memories", "scope", "universe"),
    ("memory_history", "event", "exploded"),  # the memory's history would answer 500
    ("agents", "owner_id", "00000000-0000-4000-8000-000000000001"),  # a parent that never comes
]


@dataclass
class Corrupted:
    """The export of the visibility world (`good`), and the same file with one bad value."""

    good: bytes
    bad: bytes


@pytest.fixture
def corrupted(
    client: TestClient, world: World, database_url: str, request: pytest.FixtureRequest
) -> Corrupted:
    """`request.param`, a `BAD_VALUES` entry (table, column, value), put into the last row of
    that table of an export (a "duplicate" copies the first row's value, and its tenant: keys
    are unique per tenant). Both bad-value tests below take it."""
    table, column, value = request.param
    build(client, world)
    good = dump(database_url)
    lines = good.splitlines()
    rows = [orjson.loads(line) for line in lines[1:-1]]
    mine = [row for row in rows if row["t"] == table]
    if value == "duplicate":
        value = mine[0]["r"][column]
        mine[-1]["r"]["tenant_id"] = mine[0]["r"]["tenant_id"]
    mine[-1]["r"][column] = value
    return Corrupted(good, b"\n".join([lines[0], *map(orjson.dumps, rows), lines[-1]]) + b"\n")


def _bad(values: list[tuple[str, str, Any]]) -> Any:
    """Each bad value, for the `corrupted` fixture, with a readable test id."""
    ids = [f"{table}.{column}={value!r:.30}" for table, column, value in values]
    return pytest.mark.parametrize("corrupted", values, ids=ids, indirect=True)


@_bad(BAD_VALUES)
def test_a_bad_value_is_refused_and_leaves_nothing(
    corrupted: Corrupted, database_url: str, tmp_path: Path
) -> None:
    backend = "postgresql" if database_url.startswith("postgres") else "sqlite"
    with fresh(backend, tmp_path / "bad") as target:
        schema = _catalog(target)
        with pytest.raises(TransferError, match="nothing imported") as refused:
            import_database(target, [*io.BytesIO(corrupted.bad)])
        assert refused.value.code == "transfer_refused"
        assert _catalog(target) == schema  # indexes, keys and triggers set aside are back
        engine = sa.create_engine(target.replace("postgresql://", "postgresql+psycopg://"))
        with engine.connect() as conn:
            for name in ("organizations", "users", "memories", "memory_history", "vector_queue"):
                assert conn.execute(sa.text(f"SELECT count(*) FROM {name}")).scalar() == 0, name
        engine.dispose()
        import_database(target, [*io.BytesIO(corrupted.good)])  # the good file still goes in


@_bad([("memories", "tenant_id", None)])
def test_a_memory_without_its_tenant_is_refused_as_such(
    corrupted: Corrupted, database_url: str, tmp_path: Path
) -> None:
    """SQLite checks it by a trigger, which the load sets aside and makes once after it: the
    refusal names the memory's column, not what the missing tenant broke next."""
    backend = "postgresql" if database_url.startswith("postgres") else "sqlite"
    with fresh(backend, tmp_path / "bad") as target:
        with pytest.raises(TransferError, match="tenant_id") as refused:
            import_database(target, [*io.BytesIO(corrupted.bad)])
        assert refused.value.details["table"] == "memories"


@pytest.mark.usefixtures("small_batches")
def test_a_row_postgresql_refuses_is_named_by_its_line(
    client: TestClient, world: World, database_url: str, tmp_path: Path
) -> None:
    """One COPY takes a table's rows across batches: the line PostgreSQL names is still the
    file's (a null `content`: only the database's NOT NULL refuses it)."""
    if not database_url.startswith("postgres"):
        pytest.skip("SQLite names no row")
    build(client, world)
    lines = dump(database_url).splitlines()
    numbers = [n for n, line in enumerate(lines, start=1) if line.startswith(b'{"t":"memories"')]
    assert len(numbers) > 7
    record = orjson.loads(lines[numbers[7] - 1])
    record["r"]["content"] = None
    lines[numbers[7] - 1] = orjson.dumps(record)
    with fresh("postgresql", tmp_path / "line") as target:
        with pytest.raises(TransferError, match="nothing imported") as refused:
            import_database(target, [line + b"\n" for line in lines])
        assert refused.value.details is not None
        assert refused.value.details["line"] == numbers[7]
        assert refused.value.details["table"] == "memories"


@pytest.mark.usefixtures("batches")
def test_rows_before_their_parents_import_alike_on_both_backends(
    client: TestClient, world: World, database_url: str, tmp_path: Path
) -> None:
    """An import into an empty database checks each row's parents once every row is in, on
    SQLite as on PostgreSQL: the tables in the file's reverse order (children first) load."""
    build(client, world)
    export = dump(database_url)
    lines = export.splitlines()
    tables = list(dict.fromkeys(orjson.loads(line)["t"] for line in lines[1:-1]))
    children_first = [
        line
        for table in reversed(tables)
        for line in lines[1:-1]
        if orjson.loads(line)["t"] == table
    ]
    backend = "postgresql" if database_url.startswith("postgres") else "sqlite"
    with fresh(backend, tmp_path / "reversed") as target:
        import_database(target, [line + b"\n" for line in [lines[0], *children_first, lines[-1]]])
        assert rows_of(dump(target)) == rows_of(export)


@pytest.mark.parametrize(
    "line", [b"[]", b"5", b'"text"', b"null", b'{"t":"organizations","r":{}}', b'{"t":"x","r":[]}']
)
@pytest.mark.parametrize("merge", [False, True])
def test_a_line_that_is_not_a_row_is_refused(
    database_url: str, tmp_path: Path, line: bytes, merge: bool
) -> None:
    header = orjson.dumps({"format": "mnemos-export", "version": FORMAT_VERSION}) + b"\n"
    trailer = b'{"end":true,"rows":{"organizations":1}}\n'
    backend = "postgresql" if database_url.startswith("postgres") else "sqlite"
    with fresh(backend, tmp_path / "lines") as target:
        with pytest.raises(TransferError, match="Line 2 is not a row record") as refused:
            import_database(target, [header, line + b"\n", trailer], merge=merge)
        assert refused.value.details == {"line": 2}


@_bad([bad for bad in BAD_VALUES if bad[2] != "duplicate"])
def test_a_bad_value_is_refused_by_a_merge_too(
    corrupted: Corrupted, database_url: str, tmp_path: Path
) -> None:
    """--merge refuses what an import into an empty database refuses (a key twice aside: a
    merge skips it), as `transfer_refused` naming the line or the database's reason."""
    backend = "postgresql" if database_url.startswith("postgres") else "sqlite"
    with fresh(backend, tmp_path / "merge") as target:
        with client_on(target) as other:
            World(other.app.state.services.store).user("Someone", "elsewhere")
        before = _counts(target)
        with pytest.raises(TransferError, match="nothing imported") as refused:
            import_database(target, [*io.BytesIO(corrupted.bad)], merge=True)
        assert refused.value.code == "transfer_refused"
        assert _counts(target) == before


def _counts(url: str) -> dict[str, int]:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as conn:
        counts = {
            name: int(conn.execute(sa.text(f"SELECT count(*) FROM {name}")).scalar_one())
            for name in ("organizations", "users", "agents", "memories", "memory_history")
        }
    engine.dispose()
    return counts
