"""PostgreSQL's pooled connections are pinged only after they sat idle (`storage/pg_pool.py`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mnemos.storage import pg_pool
from mnemos.storage.base import Store


@pytest.fixture
def engine(store: Store) -> Engine:
    engine: Engine = store._write_engine  # type: ignore[attr-defined]
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite has no server to lose a connection to")
    return engine


@pytest.fixture
def pings(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every ping the engine's dialect sends (SQLAlchemy's pre-ping calls the same method)."""
    sent: list[Any] = []
    ping = engine.dialect.do_ping

    def counted(dbapi_connection: Any) -> bool:
        sent.append(dbapi_connection)
        return ping(dbapi_connection)

    monkeypatch.setattr(engine.dialect, "do_ping", counted)
    yield sent


def backend_pid(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())


def test_a_connection_used_a_moment_ago_is_not_pinged(engine: Engine, pings: list[Any]) -> None:
    """Checkouts one after another send their statements and nothing else (a ping is a round
    trip: a semantic search checks out four connections)."""
    first = backend_pid(engine)
    assert [backend_pid(engine) for _ in range(3)] == [first] * 3
    assert pings == []


def test_a_connection_that_broke_while_idle_is_replaced(
    engine: Engine, pings: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection idle past `PING_AFTER_IDLE_S` is pinged; the server closed it meanwhile (a
    restart, an idle timeout), so the pool hands out a new one and the read succeeds; the new
    one, used a moment ago, is not pinged again."""
    monkeypatch.setattr(pg_pool, "PING_AFTER_IDLE_S", 0.05)
    first = backend_pid(engine)
    killer = sa.create_engine(engine.url, poolclass=sa.pool.NullPool)
    with killer.connect() as conn:
        assert conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": first}).scalar()
    killer.dispose()
    time.sleep(0.1)
    second = backend_pid(engine)
    assert second != first
    assert backend_pid(engine) == second
    assert len(pings) == 1
