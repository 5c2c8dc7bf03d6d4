"""PostgreSQL, the production store: psycopg 3, a connection pool per process, tsvector search.

Search matches the generated `memories.search` column (GIN-indexed), the `simple` configuration
over `search_text`, which holds the words `mnemos.domain.search.words_of` found in the content:
both backends index exactly the same words.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.dml import Insert

from mnemos.domain.queries import Audience
from mnemos.domain.search import SearchQuery
from mnemos.errors import SearchTooExpensive
from mnemos.storage.replicas import replica_set
from mnemos.storage.rows import read_json
from mnemos.storage.schema import memories
from mnemos.storage.sql import SqlStore
from mnemos.storage.sql_base import DEFAULT_SEARCH_BUDGET_MS, driver_connection


def tsquery(search: SearchQuery) -> str:
    """A `to_tsquery` expression: words as prefixes, short words whole, phrases with `<->`,
    all ANDed."""
    terms = [f"{word}:*" for word in search.words]
    terms += list(search.whole_words)
    terms += ["(" + " <-> ".join(phrase) + ")" for phrase in search.phrases]
    return " & ".join(terms)


def driver_url(url: str) -> str:
    """`postgresql://...` as users write it, with the psycopg 3 driver named for SQLAlchemy."""
    scheme, sep, rest = url.partition("://")
    if scheme in {"postgresql", "postgres"}:
        scheme = "postgresql+psycopg"
    return f"{scheme}{sep}{rest}"


STATEMENT_TIMEOUT_MS = 15_000
REPLICA_CONNECT_TIMEOUT_S = 2  # a replica that does not answer costs a read this much, once
PROBE_TIMEOUT_MS = 2_000


def _engine(url: str, pool_size: int, **connect_args: Any) -> Engine:
    # No statement may hold a connection for long; a stuck query becomes a 503.
    options = f"-c statement_timeout={connect_args.pop('statement_timeout', STATEMENT_TIMEOUT_MS)}"
    return sa.create_engine(
        driver_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        pool_timeout=10,
        json_deserializer=read_json,
        connect_args={"options": options, **connect_args},
    )


def _search_column() -> sa.ColumnElement[Any]:
    return sa.literal_column("memories.search")


def _tsquery(param: sa.BindParameter[Any]) -> sa.ColumnElement[Any]:
    """The search bound to `param` as a tsquery, its text a literal (see `_search_clause`)."""
    words = sa.bindparam(param.key, type_=sa.String(), literal_execute=True)
    return sa.func.to_tsquery(sa.literal_column("'simple'::regconfig"), words)


class PostgresStore(SqlStore):
    """Many stateless Mnemos processes can share one of these."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 8,
        search_budget_ms: int = DEFAULT_SEARCH_BUDGET_MS,
        replica_urls: Sequence[str] = (),
        replica_max_lag: float = 1.0,
    ):
        engine = _engine(url, pool_size)
        # Reads run in autocommit: under READ COMMITTED every statement takes its own snapshot
        # anyway, and a read then costs one round trip instead of BEGIN, SELECT and ROLLBACK.
        # A `snapshot()` is one REPEATABLE READ transaction: one state for all its reads.
        reads = engine.execution_options(isolation_level="AUTOCOMMIT")
        snapshots = engine.execution_options(isolation_level="REPEATABLE READ")
        super().__init__(
            read_engine=reads,
            write_engine=engine,
            snapshot_engine=snapshots,
            search_budget_ms=search_budget_ms,
        )
        if replica_urls:

            def replica_engine(replica_url: str, probe: bool) -> Engine:
                if probe:
                    return _engine(
                        replica_url,
                        1,
                        connect_timeout=REPLICA_CONNECT_TIMEOUT_S,
                        statement_timeout=PROBE_TIMEOUT_MS,
                    )
                return _engine(replica_url, pool_size, connect_timeout=REPLICA_CONNECT_TIMEOUT_S)

            self._replicas = replica_set(engine, replica_urls, replica_max_lag, replica_engine)

    def _search_clause(self, param: sa.BindParameter[Any]) -> sa.ColumnElement[bool]:
        # The query text goes into the SQL as a literal (it holds only normalized words and
        # tsquery operators). psycopg prepares a statement after five runs and PostgreSQL may
        # then use a generic plan: with the terms as a parameter that plan cannot tell a common
        # word from a rare one, and a common word scoped to one agent went from 1.7 ms (walk the
        # agent's index, recheck) to 57 ms (bitmap of every match, then sort). With the literal,
        # each search text gets its own statement and plans that know the words.
        return _search_column().op("@@")(_tsquery(param))

    def _search_rank(
        self, param: sa.BindParameter[Any]
    ) -> tuple[sa.FromClause, sa.ColumnElement[bool], sa.ColumnElement[float]]:
        terms = _tsquery(param)
        score = sa.func.ts_rank(_search_column(), terms, type_=sa.Float())
        return memories, _search_column().op("@@")(terms), score

    def _search_value(self, search: SearchQuery, audience: Audience) -> str:  # noqa: ARG002
        return tsquery(search)

    @contextmanager
    def _search_budget(self, conn: Connection) -> Iterator[None]:
        # A session SET (reads run in autocommit, where SET LOCAL would do nothing), undone by
        # RESET to the connection's own 15 s. Inside a failed transaction (a `snapshot()`) the
        # RESET cannot run, and need not: the rollback that follows undoes the SET.
        from psycopg.errors import QueryCanceled  # the driver is an optional extra
        from psycopg.pq import TransactionStatus

        conn.exec_driver_sql(f"SET statement_timeout = {int(self._search_budget_ms)}")
        try:
            yield
        except sa.exc.OperationalError as exc:
            if not isinstance(exc.orig, QueryCanceled):
                raise
            raise SearchTooExpensive(details={"budget_ms": self._search_budget_ms}) from exc
        finally:
            status = driver_connection(conn).info.transaction_status
            if status != TransactionStatus.INERROR:
                conn.exec_driver_sql("RESET statement_timeout")

    def _insert_ignore(self, table: sa.Table) -> Insert:
        return pg_insert(table).on_conflict_do_nothing()
