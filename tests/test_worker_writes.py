"""The embedding worker's writes do not wait for the disk (docs/search.md, "Write path").

Triggers record the durability setting in effect inside the worker's transactions: SQLite's
`synchronous` pragma (which its COMMIT obeys: the pragma cannot change inside a transaction),
PostgreSQL's `synchronous_commit`. The store itself is durable (`synchronous=FULL`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from mnemos.config import Settings
from mnemos.domain.ports import Embedder
from mnemos.domain.recall import embed_pending
from mnemos.embedding import load_embedder
from mnemos.storage.base import Store
from mnemos.storage.sql_base import SqlBase
from tests.world import World, agent_memory

WATCHED = [  # (name, event, table): a store queues, the worker claims, then saves
    ("store", "INSERT", "vector_queue"),
    ("claim", "UPDATE", "vector_queue"),
    ("save", "INSERT", "memory_vectors"),
]
SQLITE_TRIGGERS = [
    "CREATE TABLE seen_settings (n INTEGER PRIMARY KEY, what TEXT, setting TEXT)",
    *(
        f"CREATE TRIGGER seen_{what} AFTER {event} ON {table} BEGIN INSERT INTO seen_settings "
        f"(what, setting) SELECT '{what}', synchronous FROM pragma_synchronous; END"
        for what, event, table in WATCHED
    ),
]
SQLITE_DROP = [
    *(f"DROP TRIGGER seen_{what}" for what, _, _ in WATCHED),
    "DROP TABLE seen_settings",
]

POSTGRES_TRIGGERS = [
    "CREATE TABLE seen_settings (n SERIAL PRIMARY KEY, what TEXT, setting TEXT)",
    "CREATE FUNCTION seen_setting() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "INSERT INTO seen_settings (what, setting) "
    "VALUES (TG_ARGV[0], current_setting('synchronous_commit')); RETURN NULL; END $$",
    *(
        f"CREATE TRIGGER seen_{what} AFTER {event} ON {table} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION seen_setting('{what}')"
        for what, event, table in WATCHED
    ),
]
POSTGRES_DROP = [
    *(f"DROP TRIGGER seen_{what} ON {table}" for what, _, table in WATCHED),
    "DROP FUNCTION seen_setting()",
    "DROP TABLE seen_settings",
]

# What each backend's setting reads as: durable, and not waiting for the disk.
DURABLE = {"sqlite": "2", "postgresql": "on"}  # synchronous=FULL is 2
LAZY = {"sqlite": "1", "postgresql": "off"}  # synchronous=NORMAL is 1


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # The suite's SQLite stores skip fsyncs (NORMAL); a server's default is FULL.
    return settings.model_copy(update={"sqlite_synchronous": "FULL"})


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    loaded = load_embedder("local")
    assert loaded is not None
    return loaded


def backend(store: Store) -> str:
    assert isinstance(store, SqlBase)
    return "sqlite" if store._write_engine.dialect.name == "sqlite" else "postgresql"


@pytest.fixture
def seen(store: Store) -> Iterator[sa.Engine]:
    """An engine of its own on the store's database, with the triggers in place."""
    assert isinstance(store, SqlBase)
    engine = sa.create_engine(store._write_engine.url)
    create, drop = (
        (SQLITE_TRIGGERS, SQLITE_DROP)
        if backend(store) == "sqlite"
        else (POSTGRES_TRIGGERS, POSTGRES_DROP)
    )
    with engine.begin() as conn:
        for statement in create:
            conn.exec_driver_sql(statement)
    yield engine
    with engine.begin() as conn:
        for statement in drop:
            conn.exec_driver_sql(statement)
    engine.dispose()


def settings_seen(engine: sa.Engine) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT what, setting FROM seen_settings ORDER BY n")
        return [(row[0], str(row[1])) for row in rows]


def test_the_worker_claims_and_saves_without_waiting_for_the_disk_a_store_waits(
    store: Store, world: World, seen: sa.Engine, embedder: Embedder
) -> None:
    agent = world.agent(world.user("Ann", "acme"), "Writer")
    store.insert_memory(agent_memory(agent, "the first note"))

    assert embed_pending(store, embedder, 8) == 1
    store.insert_memory(agent_memory(agent, "the second note"))

    assert store.vector_backlog() == 1
    durable, lazy = DURABLE[backend(store)], LAZY[backend(store)]
    assert settings_seen(seen) == [
        ("store", durable),
        ("claim", lazy),
        ("save", lazy),
        ("store", durable),  # the durable setting is back on the writer's connection
    ]


def test_a_lazy_commit_that_fails_with_its_rollback_leaves_no_lazy_connection(
    store: Store, world: World
) -> None:
    """Were a lazy write's COMMIT and its ROLLBACK both to fail (an I/O error twice), its
    transaction would stay open and `synchronous` could not change back: the next durable
    commit would then run on that connection without its fsync. The connection is closed
    instead (the failures are raised by engine events, before the driver's COMMIT and
    ROLLBACK: the transaction is really still open)."""
    if backend(store) != "sqlite":
        pytest.skip("SQLite's setting is per connection; PostgreSQL's is SET LOCAL")
    assert isinstance(store, SqlBase)
    engine = store._write_engine

    def refuse(_conn: object) -> None:
        raise sa.exc.OperationalError("COMMIT", {}, Exception("disk I/O error"))

    levels: list[int] = []

    def level(conn: sa.Connection) -> None:
        raw = conn.connection.driver_connection
        assert raw is not None
        levels.append(raw.execute("PRAGMA synchronous").fetchone()[0])

    agent = world.agent(world.user("Ann", "acme"), "Writer")
    for event in ("commit", "rollback"):
        sa.event.listen(engine, event, refuse)
    try:
        with pytest.raises(Exception), store._lazy_write() as conn:  # noqa: B017, PT011
            conn.exec_driver_sql("SELECT 1")
    finally:
        for event in ("commit", "rollback"):
            sa.event.remove(engine, event, refuse)
    sa.event.listen(engine, "commit", level)
    try:
        store.insert_memory(agent_memory(agent, "a durable note"))
    finally:
        sa.event.remove(engine, "commit", level)
    assert levels == [2]  # FULL: the fsync
