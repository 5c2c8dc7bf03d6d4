"""PostgreSQL's pooled connections: pinged before use only after they sat idle.

SQLAlchemy's `pool_pre_ping` pings every connection at every checkout: one round trip more per
checkout, and a semantic search checks out four (the credential, the search, the page's rows,
the kept answer). A connection handed back less than `PING_AFTER_IDLE_S` ago was working then;
one idle longer is pinged as before, and replaced when the ping fails. A restarted database
takes longer than that to come back, so every connection from before the restart has been idle
past it by then and is pinged; a connection that breaks while in use fails its statement, and
SQLAlchemy then replaces the whole pool, as with `pool_pre_ping` (docs/decisions.md, "A pooled
connection is pinged only after it sat idle").
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import Engine

PING_AFTER_IDLE_S = 1.0
"""How long a connection may sit in the pool and still be handed out without a ping."""

_IDLE_SINCE = "mnemos_idle_since"  # the connection record's `info` key: when it was handed back


def ping_when_idle(engine: Engine) -> Engine:
    """Make `engine`'s pool ping a connection before handing it out only when it sat idle for
    `PING_AFTER_IDLE_S` or more (a connection that fails the ping is replaced by a new one)."""

    @sa.event.listens_for(engine, "checkin")
    def handed_back(dbapi_connection: Any, record: Any) -> None:  # noqa: ARG001
        record.info[_IDLE_SINCE] = time.monotonic()

    @sa.event.listens_for(engine, "checkout")
    def handed_out(dbapi_connection: Any, record: Any, proxy: Any) -> None:  # noqa: ARG001
        since = record.info.pop(_IDLE_SINCE, None)
        if since is None or time.monotonic() - since < PING_AFTER_IDLE_S:
            return  # a new connection, or one used a moment ago
        try:
            engine.dialect.do_ping(dbapi_connection)
        except psycopg.Error as exc:
            # The pool discards this connection and hands out a new one.
            raise sa.exc.DisconnectionError(str(exc)) from exc

    return engine
