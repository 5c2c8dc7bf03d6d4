"""PostgreSQL, the production store: psycopg 3, a connection pool per process, tsvector search.

Search matches the generated `memories.search` column (GIN-indexed), the `simple` configuration
over `search_text`, which holds the words `mnemos.domain.search.words_of` found in the content:
both backends index exactly the same words.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
import threading
import time
import uuid
from collections.abc import Generator, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.dml import Delete, Insert

from mnemos.domain.ids import utcnow
from mnemos.domain.models import EncodedBatch
from mnemos.domain.queries import Audience
from mnemos.domain.search import SearchQuery
from mnemos.errors import SearchTooExpensive, StorageUnavailable
from mnemos.storage.pg_export import PIPELINED_EXPORTS, Statements, pipelined_batches
from mnemos.storage.replicas import Mark, replica_set
from mnemos.storage.rows import read_json
from mnemos.storage.schema import UTCDateTime, memories
from mnemos.storage.search_plan import TermStats
from mnemos.storage.sql import RECHECK_PREFIX, SqlStore
from mnemos.storage.sql_base import (
    DEFAULT_SEARCH_BUDGET_MS,
    ERASURES_LOCK,
    EXPIRED_CLEANED,
    Keys,
    Layouts,
    driver_connection,
)
from mnemos.storage.sql_conditions import narrowest_owner
from mnemos.storage.sql_vectors import BLOB_READS, OWNER_COLUMNS, owner_keys


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


FORGET_VECTORS = sa.text(
    "WITH queued AS (DELETE FROM vector_queue WHERE tenant_id = :tenant "
    "AND memory_pk = ANY(:keys)) "
    "DELETE FROM memory_vectors WHERE tenant_id = :tenant AND memory_pk = ANY(:keys)"
).bindparams(
    sa.bindparam("tenant", type_=sa.Uuid()), sa.bindparam("keys", type_=ARRAY(sa.BigInteger()))
)
"""`_forget_vectors` for one tenant (the queue's rows and the vectors' in one statement)."""

KEEP_SEARCH = sa.text(
    "WITH lazy AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)), "
    "expired AS (DELETE FROM search_pages WHERE search_id IN (SELECT search_id "
    "FROM search_pages WHERE expires_at < :now LIMIT :cleaned FOR UPDATE SKIP LOCKED)), "
    "kept AS (INSERT INTO search_pages (search_id, expires_at, ranked, owner) "
    "VALUES (:search_id, :expires_at, :ranked, :owner) "
    "ON CONFLICT DO NOTHING RETURNING search_id), "
    "trimmed AS (DELETE FROM search_pages WHERE search_id IN (SELECT search_id "
    "FROM search_pages WHERE owner = :owner AND EXISTS (SELECT FROM kept) "
    "ORDER BY expires_at DESC, search_id DESC OFFSET :most - 1 FOR UPDATE SKIP LOCKED)) "
    "SELECT count(*) FROM lazy"
).bindparams(
    sa.bindparam("now", type_=UTCDateTime()),
    sa.bindparam("expires_at", type_=UTCDateTime()),
    sa.bindparam("ranked", type_=sa.LargeBinary()),
)
"""`SqlBase._keep` in one statement, one round trip in autocommit (the transaction took six:
BEGIN, the lazy commit's SET, the three statements, COMMIT). The parts see the table as it was
before the statement, so the trim keeps the owner's newest `most - 1` others, and only when
this answer was kept (the new one is the newest: it expires last); a row both parts delete
goes once. `set_config(..., true)` makes this statement's own commit asynchronous, as
`_lazy_write`'s SET LOCAL does."""

STATEMENT_TIMEOUT_MS = 15_000


def array_literal(keys: Sequence[int]) -> str:
    """Integer keys as one `bigint[]` literal (`{1,2,3}`), bound as text and cast in the
    statement: psycopg dumps a list of ints element by element (a pattern search each),
    measured 0.6 ms for the rescoring's 400 keys against 0.05 ms to join them."""
    return "{" + ",".join(map(str, keys)) + "}"


class KeysArray(sa.types.TypeDecorator[list[int]]):
    """A list of integer keys bound as one `array_literal` (cast to `bigint[]` by the
    statement)."""

    impl = sa.Text
    cache_ok = True

    def process_bind_param(self, value: list[int] | None, dialect: Any) -> str | None:  # noqa: ARG002
        return None if value is None else array_literal(value)


BLOB_SQL: dict[str, str] = {}  # `_blob_rows`' statements, compiled for psycopg
STATS_SECONDS = 60.0  # how long a process keeps the column statistics it read
WALKED_OWNERS = ("source_agent_id", "chat_room_id", "organization_id")  # (`_cuts_pool`)
POOL_MIN_SHARE = 0.05
"""A hybrid's keyword leg looks for its pool (`_search_rank`) by walking the owner's index first
only for a search estimated to match at least this share of all memories (a rarer one: in the
GIN index alone); the walk stops after `pool / POOL_MIN_SHARE` rows of the owner's index (10,000
for `HYBRID_POOL`). Walking costs ~3 us a row, a GIN bitmap ~0.4 us a match in the whole index:
at 1,000,000 memories they break even near 5% (measured, issue 13). Only the plan: the pool is
the owner's newest matches either way."""

# The statistics ANALYZE (or autovacuum) keeps on the tsvector column: its most common lexemes
# and the share of rows holding each; the array's last three entries are the least and greatest
# share and the share of NULLs. The planner reads the same ones.
COLUMN_STATS_SQL = """
SELECT s.most_common_elems::text::text[], s.most_common_elem_freqs, c.reltuples
FROM pg_class c LEFT JOIN pg_stats s
  ON s.schemaname = current_schema() AND s.tablename = 'memories' AND s.attname = 'search'
WHERE c.oid = 'memories'::regclass
"""


@dataclass(frozen=True)
class LexemeStats:
    """The tsvector column's most common lexemes (sorted) with the share of rows holding each."""

    rows: int
    lexemes: list[str]
    cumulative: list[float]  # cumulative[i]: the shares of lexemes[:i] added up
    floor: float  # the least share kept: a lexeme not listed is rarer than this

    def share(self, word: str, prefix: bool) -> float:
        """The share of rows holding `word` (every word starting with it, for a prefix)."""
        low = bisect.bisect_left(self.lexemes, word)
        high = (
            bisect.bisect_left(self.lexemes, word + "\U0010ffff")
            if prefix
            else low + (low < len(self.lexemes) and self.lexemes[low] == word)
        )
        listed = self.cumulative[high] - self.cumulative[low]
        # A prefix may also cover lexemes too rare to be listed; a whole word not listed is rare.
        unlisted = self.floor if prefix else (0.0 if high > low else self.floor / 2)
        return min(1.0, listed + unlisted)


def lexeme_stats(elems: list[str] | None, freqs: list[float] | None, rows: float) -> LexemeStats:
    """`LexemeStats` from the `pg_stats` row (no lexemes listed: nothing is known to be common)."""
    if not elems or not freqs:
        return LexemeStats(max(int(rows), 0), [], [0.0], 0.0)
    pairs = sorted(zip(elems, freqs[: len(elems)], strict=True))
    return LexemeStats(
        max(int(rows), 0),
        [lexeme for lexeme, _ in pairs],
        [0.0, *itertools.accumulate(share for _, share in pairs)],
        float(freqs[len(elems)]),
    )


REPLICA_CONNECT_TIMEOUT_S = 2  # a replica that does not answer costs a read this much, once
PROBE_TIMEOUT_MS = 2_000
# Every connection speaks UTF-8 whatever the environment says (libpq reads PGCLIENTENCODING):
# the person's export hands over the bytes PostgreSQL sent (`pg_export`), served as UTF-8.
CLIENT_ENCODING = {"client_encoding": "UTF8"}


def _engine(
    url: str, pool_size: int, isolation_level: str | None = None, **connect_args: Any
) -> Engine:
    # No statement may hold a connection for long; a stuck query becomes a 503. A connection is
    # pinged before every use: one that died since (a restart, `pg_terminate_backend`, a proxy
    # dropping it) is replaced before the request meets it (docs/decisions.md, "A pooled
    # connection is pinged only after it sat idle", and review15's finding 4).
    options = f"-c statement_timeout={connect_args.pop('statement_timeout', STATEMENT_TIMEOUT_MS)}"
    return sa.create_engine(
        driver_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        pool_timeout=10,
        json_deserializer=read_json,
        connect_args={"options": options, **CLIENT_ENCODING, **connect_args},
        **({"isolation_level": isolation_level} if isolation_level else {}),
    )


TS_RANK_LENGTH: sa.ColumnClause[Any] = sa.literal_column("1")
"""`ts_rank`'s normalization: its score divided by 1 + log(the memory's length in words)."""


def _search_column() -> sa.ColumnElement[Any]:
    return sa.literal_column("memories.search")


def _tsquery(param: sa.BindParameter[Any]) -> sa.ColumnElement[Any]:
    """The search bound to `param` as a tsquery, its text a literal (see `_search_clause`)."""
    words = sa.bindparam(param.key, type_=sa.String(), literal_execute=True)
    return sa.func.to_tsquery(sa.literal_column("'simple'::regconfig"), words)


def _owner_rows(
    table: sa.FromClause, audience: Audience, index: int
) -> list[sa.ColumnElement[bool]]:
    """The rows of `audience`'s owner in `table`, as its ordered index holds them: an agent's
    or a room's, or an organization's with one scope (`PostgresStore._cuts_pool`)."""
    column = narrowest_owner(audience)
    assert column is not None  # `_cuts_pool`
    owner = [table.c[column] == sa.bindparam(f"a{index}_{column}")]
    if column == "organization_id":  # ix_memories_org_order: (organization_id, scope, ...)
        owner.append(table.c.scope.in_(sa.bindparam(f"a{index}_scopes", expanding=True)))
    return owner


def _newest_matches(
    terms: sa.ColumnElement[Any], pool: int, audience: Audience, index: int
) -> sa.Select[Any]:
    """`(tenant_id, pk)` of the owner's newest `pool` matches, from every match looked up in
    the GIN index (a bitmap), sorted. The matches are materialized first: with the LIMIT in
    sight, the planner may walk the owner's index backwards for a word it thinks common, past
    every row of an owner that rarely uses it."""
    found = memories.alias(f"found{index}")
    matches = (
        sa.select(found.c.tenant_id, found.c.pk, found.c.inserted_at, found.c.id)
        .where(
            *_owner_rows(found, audience, index),
            sa.literal_column(f"found{index}.search").op("@@")(terms),
        )
        .cte(f"matches{index}")
        .prefix_with("MATERIALIZED")
    )
    return (
        sa.select(matches.c.tenant_id, matches.c.pk)
        .order_by(matches.c.inserted_at.desc(), matches.c.id.desc())
        .limit(sa.literal_column(str(pool)))
    )


def _beyond_walk(pool: int, audience: Audience, index: int) -> sa.ColumnElement[bool]:
    """Whether the owner has more rows than `_walked_matches` walks at most (any order: the
    planner may read its index without the heap where the visibility map allows)."""
    beyond = memories.alias(f"beyond{index}")
    return sa.exists(
        sa.select(sa.literal(1))
        .where(*_owner_rows(beyond, audience, index))
        .limit(1)
        .offset(sa.literal_column(str(_walk_rows(pool))))
    )


def _walk_rows(pool: int) -> int:
    """The most rows of the owner's index a walk for a pool of `pool` reads."""
    return math.ceil(pool / POOL_MIN_SHARE)


def _walked_matches(
    terms: sa.ColumnElement[Any], pool: int, audience: Audience, index: int
) -> sa.CTE:
    """`(tenant_id, pk)` of the owner's newest `pool` matches among its newest
    `pool / POOL_MIN_SHARE` rows (its index walked backwards, each row tested): the same
    rows as `_newest_matches` when it finds `pool`, else the newest of them (materialized:
    they are counted too)."""
    walked = memories.alias(f"walked{index}")
    newest = (
        sa.select(
            walked.c.tenant_id,
            walked.c.pk,
            sa.literal_column(f"walked{index}.search").label("search"),  # not in `schema`
            walked.c.inserted_at,
            walked.c.id,
        )
        .where(*_owner_rows(walked, audience, index))
        .order_by(walked.c.inserted_at.desc(), walked.c.id.desc())
        # A LIMIT the planner cannot read (a sub-select) is planned as a tenth of the rows:
        # it walks the index backwards. A constant at least the owner's row count planned
        # a bitmap of all of them and a sort, and read every row before the first match.
        .limit(sa.literal_column(f"(SELECT {_walk_rows(pool)})"))
        .subquery(f"newest{index}")
    )
    return (
        sa.select(newest.c.tenant_id, newest.c.pk)
        .where(newest.c.search.op("@@")(terms))
        .order_by(newest.c.inserted_at.desc(), newest.c.id.desc())
        .limit(sa.literal_column(str(pool)))
        .cte(f"walk{index}")
        .prefix_with("MATERIALIZED")
    )


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
        # Searches outside a snapshot get connections of their own whose statement_timeout is
        # the search budget: no SET and RESET around each search (two round trips).
        self._search_engine = _engine(
            url, pool_size, "AUTOCOMMIT", statement_timeout=int(search_budget_ms)
        )
        self._stats: tuple[float, LexemeStats] | None = None
        self._stats_lock = threading.Lock()
        self._read_ahead = threading.BoundedSemaphore(PIPELINED_EXPORTS)  # exports at once
        self._export_sql: Statements | None = None
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

    def _cuts_pool(self, audience: Audience) -> bool:
        # The pool is walked on the owner's index newest first (`_search_rank`): an agent's or
        # a room's, or an organization's with one scope (its index orders by scope first). As on
        # SQLite, never a subject's (every tenant's memories about a person) nor no owner's.
        column = narrowest_owner(audience)
        if column == "organization_id":
            return audience.scopes is not None and len(audience.scopes) == 1
        return column in WALKED_OWNERS

    def _walks_pool(self, conn: Connection, search: SearchQuery) -> bool:
        # Walking first pays for a common search only: its cost is the rows walked (about
        # pool / share), the bitmap's is every match in the index (share * rows). The share of
        # the whole query is estimated as the product of its parts' (they are ANDed). The
        # statistics count every tenant's memories: they choose the plan, never the pool.
        stats = self._term_stats(conn, search)
        if stats is None or stats.rows <= 0:
            return False
        share = 1.0
        for postings in stats.postings:
            share *= min(postings / stats.rows, 1.0)
        return share >= POOL_MIN_SHARE

    def _search_rank(
        self,
        param: sa.BindParameter[Any],
        pool: int | None,
        audience: Audience,
        index: int,
        walk: bool,
    ) -> tuple[
        sa.FromClause, sa.ColumnElement[bool], sa.ColumnElement[float], sa.FromClause | None
    ]:
        # Without a pool, every match is scored: a common word's cost is then the GIN bitmap
        # of all its matches in every tenant (84,000 for a word in 10% of 1,000,000 memories:
        # ~40 ms), which a LIMIT does not shorten. With a pool, only the owner's newest `pool`
        # matches are scored: each is read again below through the primary key with every
        # condition of the audience (docs/decisions.md, "A walked pool on PostgreSQL" and "The
        # pool is the owner's newest matches").
        terms = _tsquery(param)
        # From the row alone, as SQLite's (`domain/search.py` `relevance`): normalization 1
        # divides by 1 + log(the memory's length), so the same count in a longer memory
        # weighs less.
        score = sa.func.ts_rank(_search_column(), terms, TS_RANK_LENGTH, type_=sa.Float())
        if pool is None:
            return memories, _search_column().op("@@")(terms), score, None
        newest: sa.Select[Any] | sa.CompoundSelect[Any] = _newest_matches(
            terms, pool, audience, index
        )
        if walk:
            # A common word (`_walks_pool`): the owner's index walked newest first, at most
            # `pool / POOL_MIN_SHARE` entries, each row tested against the search, until `pool`
            # match. Only when the walk ends with fewer and the owner has rows it did not reach
            # (its matches are older, or rarer than the statistics said) are the matches looked
            # up as for a rare word; a walk to the owner's last row found them all. Both tests
            # are one-time filters: PostgreSQL evaluates the second only if the first holds.
            walked = _walked_matches(terms, pool, audience, index)
            found = sa.select(sa.func.count()).select_from(walked).scalar_subquery()
            rest = newest.subquery(f"rest{index}")
            newest = sa.union(  # distinct: the rest holds the walk's rows again
                sa.select(walked.c.tenant_id, walked.c.pk),
                sa.select(rest.c.tenant_id, rest.c.pk).where(
                    found < pool, _beyond_walk(pool, audience, index)
                ),
            )
        rows = newest.cte(f"pool{index}").prefix_with("MATERIALIZED")
        keys = sa.select(rows.c.tenant_id, rows.c.pk)
        return memories, sa.tuple_(memories.c.tenant_id, memories.c.pk).in_(keys), score, rows

    def _search_value(self, search: SearchQuery, audience: Audience) -> str:  # noqa: ARG002
        return tsquery(search)

    @contextmanager
    def _search_read(self) -> Iterator[Connection]:
        # A search connection has the budget as its statement_timeout already (even the pool's
        # ping runs under it). Inside a snapshot() (a transaction), SET LOCAL sets it until that
        # transaction ends (or its savepoint is rolled back).
        # On a replica (a read routed there), the budget is set and reset around the search.
        pin = getattr(self._pinned, "pin", None)
        budget = int(self._search_budget_ms)
        if pin is None and getattr(self._route, "replica", None) is not None:
            with self._read() as conn, self._canceled_as_too_expensive():
                conn.exec_driver_sql(f"SET statement_timeout = {budget}")
                try:
                    yield conn
                finally:
                    conn.exec_driver_sql("RESET statement_timeout")
            return
        with self._guard(), self._canceled_as_too_expensive():
            if pin is None:
                with self._search_engine.connect() as conn:
                    yield conn
                return
            # In a savepoint: a search stopped by its budget leaves the snapshot's transaction
            # usable (a hybrid search then answers by meaning in it: `Recall._hybrid`).
            with pin.conn.begin_nested():
                pin.conn.exec_driver_sql(f"SET LOCAL statement_timeout = {budget}")
                yield pin.conn

    @contextmanager
    def _canceled_as_too_expensive(self) -> Iterator[None]:
        from psycopg.errors import QueryCanceled  # the driver is an optional extra

        try:
            yield
        except sa.exc.OperationalError as exc:
            if not isinstance(exc.orig, QueryCanceled):
                raise
            raise SearchTooExpensive(details={"budget_ms": self._search_budget_ms}) from exc

    def _search_budget(self, conn: Connection) -> AbstractContextManager[None]:  # noqa: ARG002
        return nullcontext()  # `_search_read` sets and enforces it

    def _term_stats(self, conn: Connection, search: SearchQuery) -> TermStats | None:
        stats = self._lexeme_stats(conn)
        if not stats.lexemes:
            return None
        shares = []
        for part in search.parts():
            if part.words:
                shares.append(stats.share(part.words[0], prefix=True))
            else:
                words = part.whole_words or part.phrases[0]
                shares.append(sum(stats.share(word, prefix=False) for word in words))
        return TermStats(stats.rows, tuple(int(share * stats.rows) for share in shares))

    def _lexeme_stats(self, conn: Connection) -> LexemeStats:
        """The column statistics, read at most once per `STATS_SECONDS` per process."""
        now = time.monotonic()
        cached = self._stats
        if cached is not None and now - cached[0] < STATS_SECONDS:
            return cached[1]
        with self._stats_lock:
            elems, freqs, rows = conn.exec_driver_sql(COLUMN_STATS_SQL).one()
            stats = lexeme_stats(elems, freqs, rows)
            self._stats = (now, stats)
        return stats

    def _recheck_values(self, search: SearchQuery) -> dict[str, Any]:
        return {f"{RECHECK_PREFIX}query": tsquery(search)}

    def _recheck_clause(self, names: tuple[str, ...]) -> sa.ColumnElement[bool]:
        # The function behind `@@`, which no index can serve: the planner looks up only the
        # driver terms in the GIN index and checks the whole query on the rows it found.
        (name,) = names
        return sa.func.ts_match_vq(_search_column(), _tsquery(sa.bindparam(name)))

    def _blob_rows(self, conn: Connection, name: str, params: dict[str, Any]) -> Sequence[Any]:
        # psycopg reads results as text by default, where a bytea arrives as hex and is decoded
        # in the client: 4x slower for the vector search's blobs than the binary format
        # (measured: 100,000 sign-bit rows in 26 vs 62 ms). So: the statement's SQL, compiled
        # once with its lists as one array parameter each (`= ANY(%(keys)s)`: one query text
        # whatever the list's length, so psycopg prepares it, and no per-call compile of 400
        # placeholders), run on a binary cursor of the same connection and transaction.
        sql = BLOB_SQL.get(name)
        if sql is None:
            compiled = BLOB_READS[name].compile(dialect=conn.dialect)
            sql = BLOB_SQL[name] = re.sub(
                r"IN \(__\[POSTCOMPILE_(\w+)\]\)", r"= ANY(%(\1)s)", str(compiled)
            ).replace("%(keys)s", "%(keys)s::bigint[]")
        if "keys" in params:
            params = {**params, "keys": array_literal(params["keys"])}
        with driver_connection(conn).cursor(binary=True) as cursor:
            cursor.execute(sql, params)
            rows: list[Any] = cursor.fetchall()
            return rows

    def close(self) -> None:
        super().close()
        self._search_engine.dispose()

    def memories_about_encoded(
        self, subject_id: uuid.UUID, *, limit: int
    ) -> Generator[EncodedBatch, None, None]:
        # Pipelined on one connection held for the export (`pg_export`), by a few at once.
        if not self._read_ahead.acquire(blocking=False):
            yield from super().memories_about_encoded(subject_id, limit=limit)
            return
        try:
            with self._read() as conn:
                if self._export_sql is None:
                    self._export_sql = Statements(conn.dialect)
                raw = driver_connection(conn)
                yield from pipelined_batches(raw, self._export_sql, subject_id, limit)
        except psycopg.OperationalError as exc:  # `_guard`'s, for the driver's own errors
            raise StorageUnavailable(details={"reason": str(exc)[:200]}) from exc
        finally:
            self._read_ahead.release()

    def _delete_counted(self, conn: Connection, statement: Delete) -> tuple[int, Keys, Layouts]:
        # The deleted keys gathered by the database, one array per tenant and owners: no row
        # per memory comes back (100,000 rows took longer to read than to delete).
        M = memories.c
        layout = [M.tenant_id, M.scope, *(M[column] for column, _ in OWNER_COLUMNS)]
        gone = statement.returning(M.pk, *layout).cte("gone")
        grouped = [gone.c[column.name] for column in layout]
        keys = sa.func.array_agg(gone.c.pk, type_=ARRAY(sa.BigInteger()))
        found: Keys = {}
        owners: Layouts = set()
        for tenant, scope, *columns, pks in conn.execute(
            sa.select(*grouped, keys).group_by(*grouped)
        ):
            found.setdefault(tenant, []).extend(pks)
            owners.update((tenant, owner) for owner in owner_keys(scope, columns))
        return sum(len(pks) for pks in found.values()), found, owners

    def _begin_erasure(self, conn: Connection) -> None:
        conn.exec_driver_sql("SET LOCAL statement_timeout = 0")
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock_shared({ERASURES_LOCK})")

    def _forget_vectors(self, conn: Connection, keys: Keys) -> None:
        # Both tables in one statement per tenant, the keys one array parameter (`= ANY`): one
        # round trip and one array sent; joining `unnest(keys)` instead measured slower.
        for tenant, pks in sorted(keys.items()):
            conn.execute(FORGET_VECTORS, {"tenant": tenant, "keys": pks})

    def _lock_owner(self, conn: Connection, tenant: uuid.UUID, owner: str) -> None:
        conn.execute(
            sa.text("SELECT pg_advisory_xact_lock(hashtextextended(:owner, 0))"),
            {"owner": tenant.hex + owner},
        )

    @contextmanager
    def _lazy_write(self, *, mark: Mark = False) -> Iterator[Connection]:
        # Visible to every session at once; only its WAL flush is deferred (by at most
        # wal_writer_delay), so a crash may lose it, never corrupt anything. The next
        # synchronous commit flushes the WAL up to itself, this commit's records included.
        with self._write(mark=mark) as conn:
            conn.exec_driver_sql("SET LOCAL synchronous_commit = off")
            yield conn

    def _keep(
        self, search_id: str, packed: bytes, expires_at: datetime, owner: str, most: int
    ) -> None:
        values = {"search_id": search_id, "expires_at": expires_at, "ranked": packed}
        values |= {"owner": owner, "most": most, "now": utcnow(), "cleaned": EXPIRED_CLEANED}
        with self._guard(), self._open_read() as conn:  # autocommit: the statement commits
            conn.execute(KEEP_SEARCH, values)

    def _candidates_in(self, column: sa.Column[Any]) -> sa.ColumnElement[bool]:
        # One array parameter: the statement's text is the same whatever the count, so it is
        # compiled once and psycopg prepares it, where IN renders one placeholder per key.
        keys = sa.cast(sa.bindparam("candidates", type_=KeysArray()), ARRAY(sa.BigInteger()))
        return column == sa.any_(keys)

    def _insert_ignore(self, table: sa.Table) -> Insert:
        return pg_insert(table).on_conflict_do_nothing()
