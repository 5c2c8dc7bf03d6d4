"""How Mnemos opens a SQLite file: one engine shape for the database and its kept answers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine


def sqlite_engine(
    url: str,
    *,
    pool_size: int,
    begin: str,
    busy_timeout_ms: int,
    pragmas: Sequence[str],
    on_connect: Callable[[Any], None] | None = None,
    **options: Any,
) -> Engine:
    """An engine of `pool_size` connections (no overflow), each in WAL mode, waiting up to
    `busy_timeout_ms` for a lock, set up with `pragmas` (`name=value`) and `on_connect` (the
    driver's connection); each transaction starts with `begin` (`BEGIN` or `BEGIN IMMEDIATE`),
    issued here rather than by the driver. `options` go to `create_engine`."""
    engine = sa.create_engine(
        url,
        pool_size=pool_size,
        max_overflow=0,
        pool_timeout=60,
        connect_args={"check_same_thread": False, "timeout": busy_timeout_ms / 1000},
        **options,
    )
    begin_explicitly(engine, begin)

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        for pragma in ("journal_mode=WAL", f"busy_timeout={busy_timeout_ms}", *pragmas):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()
        if on_connect is not None:
            on_connect(dbapi_conn)

    return engine


def begin_explicitly(engine: Engine, begin: str) -> None:
    """Make each of `engine`'s transactions start with `begin`, issued here rather than by the
    driver: pysqlite opens a transaction only before an INSERT, UPDATE or DELETE, so a schema
    change (`CREATE`, `ALTER`) otherwise commits on its own, apart from the statements after it
    (SQLite's DDL is transactional; the driver's habit is what splits it)."""

    @sa.event.listens_for(engine, "connect")
    def _no_driver_transactions(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql(begin)
