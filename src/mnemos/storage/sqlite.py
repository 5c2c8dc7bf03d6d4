"""Embedded SQLite: WAL mode, reads in parallel, every write through one writer connection.

Writes take `BEGIN IMMEDIATE` on a single pooled connection: writers of one process take turns
and share durable COMMITs (`group_commit.py`); writers of other processes queue on an OS lock
beside the database; other programs meet `busy_timeout`. Full-text search uses a contentless
FTS5 table of words and scope tokens kept in step by triggers (migrations 0001 and 0005).
"""

from __future__ import annotations

import fcntl
import json
import math
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite as sqlite_dialect
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.sql.dml import Delete, Insert

from mnemos.domain.queries import Audience, MemoryQuery
from mnemos.domain.search import SearchQuery, scorer
from mnemos.errors import SearchTooExpensive
from mnemos.storage.group_commit import GroupCommit
from mnemos.storage.replicas import Mark
from mnemos.storage.rows import read_json
from mnemos.storage.schema import memories
from mnemos.storage.search_plan import DRIVER_POSTINGS, TermStats
from mnemos.storage.sql import RECHECK_PREFIX, SqlStore
from mnemos.storage.sql_base import (
    DEFAULT_SEARCH_BUDGET_MS,
    EVERY_TENANT,
    Keys,
    Layouts,
    driver_connection,
)
from mnemos.storage.sql_conditions import OWNERS, narrowest_owner
from mnemos.storage.sql_vectors import BLOB_READS
from mnemos.storage.sqlite_engine import sqlite_engine
from mnemos.storage.sqlite_kept import KeptFile
from mnemos.storage.watchdog import Watchdog

BUSY_TIMEOUT_MS = 30_000
MMAP_BYTES = 1 << 40
"""Address space, not memory: SQLite maps at most the file's size, and at most its build's
`SQLITE_MAX_MMAP_SIZE` (2 GiB in Debian's). At 1,000,000 memories the file is over 3 GB, and a
search's reads past the map are copied page by page through a small cache (sem11)."""
MAX_BLOB_SQL = 256  # `blob_sql`'s texts kept
WATCHDOG = Watchdog()  # one thread per process stops searches past their budget


def fts5_query(search: SearchQuery, audience: Audience | None = None) -> str:
    """An FTS5 MATCH expression: every term quoted (so no operator survives), words as prefixes,
    all within the words column; plus the audience's most selective scope token, if it has one
    (`SCOPE_TOKENS`), so FTS5 intersects inside the index instead of returning every match.
    """
    terms = [f'"{word}"*' for word in search.words]
    terms += [f'"{word}"' for word in search.whole_words]
    terms += ['"' + " ".join(phrase) + '"' for phrase in search.phrases]
    expression = "{search_text} : (" + " ".join(terms) + ")"
    token = scope_token(audience) if audience is not None else None
    return f'{expression} AND {{scope}} : "{token}"' if token else expression


_FTS5_TERM = re.compile(r'"([^"]*)"(\*?)')


@lru_cache(maxsize=1024)
def fts5_search(expression: str) -> SearchQuery:
    """The search an `fts5_query` expression matches (its terms, not its scope token): quoted
    terms, a prefix starred, a phrase of several words, else a whole word. No term holds a
    quote or a parenthesis (`words_of`)."""
    terms = _FTS5_TERM.findall(expression[expression.index("(") : expression.index(")")])
    return SearchQuery(
        words=tuple(term for term, star in terms if star),
        phrases=tuple(tuple(term.split()) for term, star in terms if not star and " " in term),
        whole_words=tuple(term for term, star in terms if not star and " " not in term),
    )


RELEVANCE_FUNCTION = "mnemos_relevance"
"""The SQL function (`search_text`, the MATCH expression) that scores a match: `relevance` on the
row's words (`domain/search.py`), registered on every connection (`_engine`)."""


@lru_cache(maxsize=1024)
def _scorer(expression: str) -> Callable[[str], float]:
    return scorer(fts5_search(expression))


def _relevance(search_text: str, expression: str) -> float:
    return _scorer(expression)(search_text)


SCOPE_TOKENS = tuple(zip(OWNERS, ("zzag", "zzsub", "zzroom", "zzorg"), strict=True))
"""The search-token rule: each owner column of a memory (`sql_conditions.OWNERS`, narrowest
first) is indexed in the FTS `scope` column as its prefix followed by the UUID's 32 hex digits.
Migrations 0005 (triggers) and 0008 (refill) wrote it out in SQL before this constant existed:
`tests/test_sqlite_scope_tokens.py` checks that they agree with it. A new migration that indexes
scope tokens takes its SQL from `scope_tokens_sql`."""


def scope_token(audience: Audience) -> str | None:
    """The FTS token of the narrowest owner an audience pins (see `SCOPE_TOKENS`)."""
    column = narrowest_owner(audience)
    if column is None:
        return None
    return str(dict(SCOPE_TOKENS)[column] + getattr(audience, column).hex)


def scope_tokens_sql(row: str) -> str:
    """The SQL for the scope tokens of `row` (`new`, `old` or a table name), for migrations."""
    tokens = " || ".join(
        f"coalesce(' {prefix}' || {row}.{column}, '')" for column, prefix in SCOPE_TOKENS
    )
    return f"trim({tokens})"


STATS_SECONDS = 60.0  # how long a process keeps the term estimates it read
MAX_CACHED_RANGES = 4096
DOCS_PER_PAGE = 1_000
"""Index entries of one word per FTS5 leaf page of 4,050 bytes, roughly (a rowid delta, a
position list). Turns pages, which measure what a lookup reads, into `search_plan.TermStats`;
measured on the bench's data: 1,650 for `harbor`, 350-650 for 5-letter prefixes covering words
that often occur twice in a memory."""

# The pages of the FTS5 segment index each term range spans, summed over segments. `%_idx` holds
# one row per leaf page that starts a term (`segid`, the term's first bytes behind the index's
# prefix byte '0', and `pgno`, the page number shifted left by one bit): the whole pages between
# the last one starting before a range and the first one starting after it hold the range's
# entries (a range within one page counts as none). A few B-tree seeks per segment.
TERM_PAGES_SQL = """
WITH RECURSIVE seg(id) AS (
  SELECT min(segid) FROM memories_fts_idx
  UNION ALL
  SELECT (SELECT min(segid) FROM memories_fts_idx WHERE segid > seg.id) FROM seg
  WHERE seg.id IS NOT NULL
), ranges(k, lo, hi) AS (VALUES {values})
SELECT k, sum(max(0,
  (coalesce(
    (SELECT pgno FROM memories_fts_idx i WHERE i.segid = seg.id AND i.term >= ranges.hi
     ORDER BY i.term LIMIT 1),
    (SELECT pgno + 2 FROM memories_fts_idx i WHERE i.segid = seg.id ORDER BY i.term DESC LIMIT 1))
   >> 1)
  - (coalesce(
    (SELECT pgno FROM memories_fts_idx i WHERE i.segid = seg.id AND i.term < ranges.lo
     ORDER BY i.term DESC LIMIT 1),
    (SELECT pgno FROM memories_fts_idx i WHERE i.segid = seg.id ORDER BY i.term LIMIT 1))
   >> 1)
  - 1))
FROM seg, ranges WHERE seg.id IS NOT NULL GROUP BY k
"""


COUNT_BUDGET_SECONDS = 0.03
"""How long one search may spend counting the entries of terms whose pages look too common
(`SqliteStore._term_stats`). A count merges the entries of every word a prefix covers before its
LIMIT applies: 30-390 ms for each of the bench's adversarial 5-letter prefixes at 1,000,000
memories, where a term that really has at most `DRIVER_POSTINGS` entries counts in about 15 ms.
Without this bound, a stream of searches of ever new common prefixes would each pay every count
(the counts are kept per expression, so only a repeated one is cheap). A term not counted in
time keeps its estimate, too common to look up, for that search only: only a count that
completed is kept (one search's deadline says nothing about the term)."""


def _entries(conn: Connection, expression: str, most: int) -> int:
    """The index entries of an FTS5 expression, read newest first up to `most`."""
    return int(
        conn.exec_driver_sql(
            "SELECT count(*) FROM (SELECT rowid FROM memories_fts "
            "WHERE memories_fts MATCH ? LIMIT ?)",
            (expression, most),
        ).scalar_one()
    )


def _count_entries(conn: Connection, expression: str, seconds: float) -> int | None:
    """The index entries of `expression`, up to `DRIVER_POSTINGS` + 1; None when counting
    would take longer than `seconds` (not counted: no knowledge about the term). The count is
    interrupted (`WATCHDOG`) and the read transaction goes on."""
    if seconds <= 0:
        return None
    token = WATCHDOG.watch(driver_connection(conn), seconds)
    try:
        return _entries(conn, expression, DRIVER_POSTINGS + 1)
    except sa.exc.OperationalError:
        if WATCHDOG.release(token):
            return None
        raise  # the search's own budget, or a real error
    finally:
        WATCHDOG.release(token)


def term_ranges(search: SearchQuery) -> list[list[tuple[bytes, bytes]]]:
    """Per part of `search.parts()`, the `%_idx` term ranges its index entries lie in: a prefix
    covers every word that starts with it, a whole word itself, a phrase each of its words."""
    ranges: list[list[tuple[bytes, bytes]]] = []
    for part in search.parts():
        key = [b"0" + word.encode() for word in part.words]
        if key:
            ranges.append([(key[0], key[0] + b"\xff")])  # no UTF-8 byte is 0xff
        else:
            words = part.whole_words or part.phrases[0]
            ranges.append([(b"0" + w.encode(), b"0" + w.encode() + b"\x00") for w in words])
    return ranges


def recheck_values(search: SearchQuery) -> dict[str, str]:
    """`SqliteStore._recheck_values`: `search_text` is the content's words joined by single
    spaces (`index_text`), so a word starting with a prefix follows a space, and a whole word or a
    phrase stands between spaces. `p` parameters are prefixes, `w` whole words and phrases."""
    values = {}
    for index, part in enumerate(search.parts()):
        if part.words:
            values[f"{RECHECK_PREFIX}p{index}"] = " " + part.words[0]
        else:
            words = part.whole_words or part.phrases[0]
            values[f"{RECHECK_PREFIX}w{index}"] = " " + " ".join(words) + " "
    return values


INDEX_TRIGGER = "memories_fts_ai"
INDEX_REFILL_SQL = (
    "INSERT INTO memories_fts(rowid, search_text, scope) "
    f"SELECT pk, search_text, {scope_tokens_sql('memories')} FROM memories"
)
"""What `INDEX_TRIGGER` does for one new memory, done for every memory at once: `mnemos import`
sets the trigger aside while it loads an empty database and fills the index once after
(`transfer_bulk.py`; about 2.5 times faster than a trigger run per row)."""

FTS_DEFAULT_HASHSIZE = 1 << 20  # FTS5's own default (`FTS5_DEFAULT_HASHSIZE`)
FTS_REFILL_HASHSIZE = 64 << 20
FTS_HASHSIZE = "INSERT INTO memories_fts(memories_fts, rank) VALUES ('hashsize', {})"
INDEX_REFILL = (
    FTS_HASHSIZE.format(FTS_REFILL_HASHSIZE),
    INDEX_REFILL_SQL,
    FTS_HASHSIZE.format(FTS_DEFAULT_HASHSIZE),
)
"""`INDEX_REFILL_SQL` with FTS5's pending terms allowed 64 MiB instead of 1 MiB while it runs:
FTS5 writes its pending terms as a new segment whenever they outgrow that size, and merges
segments as they pile up. 100,000 memories fit in one segment, written once: the refill took
0.54-0.69 s against 0.83-0.94 s with the default, and keyword searches on the result are as fast
(bench/results/2026-12-04/import7/). The default is written back in the same transaction."""


FTS_DEFAULT_AUTOMERGE = 4  # FTS5's own default; Mnemos never sets another
FTS_AUTOMERGE = "INSERT INTO memories_fts(memories_fts, rank) VALUES ('automerge', ?)"
"""An erasure (`SqliteStore._delete_counted`) turns FTS5's automerge off for its DELETE: each
batch of delete markers FTS5 flushes would otherwise start merging the index's segments, the
large ones of an index of 1,000,000 memories included. 100,000 erased memories of 1,000,000:
the DELETE took 3.2-3.9 s with merges, 2.2-2.5 s without (bench/results/2026-12-02/rights-3/).
The setting is written inside the erasure's transaction and set back before it commits, so a
crash leaves it as it was; crisis merges (16 segments on a level) still run."""


def _engine(url: str, *, pool_size: int, begin: str, synchronous: str) -> Engine:
    return sqlite_engine(
        url,
        pool_size=pool_size,
        begin=begin,
        busy_timeout_ms=BUSY_TIMEOUT_MS,
        # Reads map the file instead of copying its pages into each connection's small cache:
        # the vector search reads a scope's sign bits (~5 MB at 100,000 memories) on every
        # query, 3x faster mapped (measured); the pages are the OS's, shared by every process.
        pragmas=(f"synchronous={synchronous}", "foreign_keys=ON", f"mmap_size={MMAP_BYTES}"),
        on_connect=_register_functions,
        json_deserializer=read_json,
    )


def _register_functions(dbapi_conn: Any) -> None:
    dbapi_conn.create_function(RELEVANCE_FUNCTION, 2, _relevance, deterministic=True)


class JsonKeys(sa.types.TypeDecorator[list[int]]):
    """A list of integer keys bound as one JSON array (read with `json_each`)."""

    impl = sa.String
    cache_ok = True

    def process_bind_param(self, value: list[int] | None, dialect: Any) -> str | None:  # noqa: ARG002
        return None if value is None else json.dumps(value)


BLOB_SQL: dict[tuple[str, int, int], str] = {}
"""`_blob_rows`' statements as SQL for the driver, by name and the lengths of the tenants' and
owners' lists (a search names few of each; its candidates' keys are one JSON array)."""


def blob_sql(name: str, tenants: int, owners: int) -> str:
    """`BLOB_READS[name]` for sqlite3's named parameters: each of `tenants` (and `owners`)
    bound as `:tenants_0`, ... (a JSON array would be read as a table and plan a scan of
    `vector_chunks`), the keys as one JSON array read by `json_each` (primary-key lookups)."""
    sql = BLOB_SQL.get((name, tenants, owners))
    if sql is None:
        counts = {"tenants": tenants, "owners": owners}

        def expanded(found: re.Match[str]) -> str:
            param = found.group(1)
            if param == "keys":
                return "IN (SELECT value FROM json_each(:keys))"
            return "IN (" + ", ".join(f":{param}_{i}" for i in range(counts[param])) + ")"

        compiled = str(BLOB_READS[name].compile(dialect=sqlite_dialect(paramstyle="named")))
        sql = re.sub(r"IN \(__\[POSTCOMPILE_(\w+)\]\)", expanded, compiled)
        if len(BLOB_SQL) >= MAX_BLOB_SQL:
            BLOB_SQL.clear()
        BLOB_SQL[(name, tenants, owners)] = sql
    return sql


def blob_params(params: dict[str, Any]) -> dict[str, Any]:
    """`_blob_rows`' parameters as `blob_sql` binds them (tenants as stored: 32 hex digits)."""
    bound: dict[str, Any] = {"model": params["model"]}
    bound.update((f"tenants_{i}", tenant.hex) for i, tenant in enumerate(params["tenants"]))
    bound.update((f"owners_{i}", owner) for i, owner in enumerate(params.get("owners", ())))
    if "keys" in params:
        bound["keys"] = json.dumps(params["keys"])
    return bound


class SqliteStore(SqlStore):
    """The embedded default."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 8,
        synchronous: str = "FULL",
        search_budget_ms: int = DEFAULT_SEARCH_BUDGET_MS,
    ):
        path = make_url(url).database or ":memory:"
        on_disk = path != ":memory:"
        if on_disk:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._synchronous = synchronous
        self._writes = GroupCommit(self._transaction, self._lazy_transaction)
        self._pages: dict[tuple[bytes, bytes], int] = {}  # `_term_stats`' cache, per range
        self._counted: dict[str, int] = {}  # `_term_stats`' exact counts, per FTS5 expression
        self._rows = 0
        self._stats_at = -math.inf
        # Writers in other processes (`mnemos serve --workers N`) queue on an OS lock beside the
        # database: the kernel wakes the next one the moment a write commits, where SQLite's
        # busy handler would sleep 1-100 ms between retries. Other programs still meet
        # `busy_timeout`. The kernel drops the lock of a process that dies.
        self._lock_file = (
            open(f"{path}.writelock", "a+b")  # noqa: SIM115 - held for the store's life
            if on_disk
            else None
        )
        # Searches' kept answers: beside the database, so that keeping one leaves its pages
        # cached in every reading connection (`sqlite_kept.py`).
        self._kept_file = KeptFile(path, BUSY_TIMEOUT_MS) if on_disk else None
        super().__init__(
            read_engine=_engine(url, pool_size=pool_size, begin="BEGIN", synchronous=synchronous),
            write_engine=_engine(
                url, pool_size=1, begin="BEGIN IMMEDIATE", synchronous=synchronous
            ),
            search_budget_ms=search_budget_ms,
        )

    @contextmanager
    def _write(self, *, mark: Mark = True) -> Iterator[Connection]:  # noqa: ARG002 - no replicas
        # Writers of this process take turns on the one writer connection and share COMMITs.
        with self._guard(), self._writes.write() as conn:
            self._queued_commit(conn)  # a flag a failed block left on the connection
            yield conn
            queued = self._queued_commit(conn)
        if queued:  # committed by now (with the group's other blocks)
            self._tell_queued()

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """A write transaction (`BEGIN IMMEDIATE`), once this process holds the write lock."""
        with self._process_lock(), self._write_engine.begin() as conn:
            yield conn

    @contextmanager
    def _lazy_write(self, *, mark: Mark = False) -> Iterator[Connection]:  # noqa: ARG002
        # Alone in its transaction (a durable batch still open commits first), so that only
        # this commit skips the fsync.
        with self._guard(), self._writes.write_lazily() as conn:
            yield conn

    @contextmanager
    def _lazy_transaction(self) -> Iterator[Connection]:
        """A write transaction whose COMMIT does not wait for the disk (`synchronous=NORMAL`:
        in WAL mode a crash may lose it, never corrupt the file; the next durable commit or
        checkpoint syncs it with the rest). The setting cannot change inside a transaction."""
        with self._process_lock(), self._write_engine.connect() as conn:
            raw = driver_connection(conn)
            raw.execute("PRAGMA synchronous=NORMAL")
            try:
                with conn.begin():
                    yield conn
            finally:
                # Were its COMMIT and then its ROLLBACK to fail, the transaction would still be
                # open and the setting could not change back: the connection, lazy, would then
                # serve the next durable commit. It is closed instead (the pool opens another).
                try:
                    raw.execute(f"PRAGMA synchronous={self._synchronous}")
                    restored = not raw.in_transaction
                except sqlite3.Error:
                    restored = False
                if not restored:
                    conn.invalidate()

    @contextmanager
    def _process_lock(self) -> Iterator[None]:
        if self._lock_file is None:
            yield
            return
        fcntl.flock(self._lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)

    def close(self) -> None:
        super().close()
        if self._kept_file is not None:
            self._kept_file.close()
        if self._lock_file is not None:
            self._lock_file.close()

    @contextmanager
    def _kept(self, *, write: bool) -> Iterator[Connection]:
        if self._kept_file is None:  # an in-memory database keeps them in itself
            with super()._kept(write=write) as conn:
                yield conn
            return
        opened = self._kept_file.write if write else self._kept_file.read
        with self._guard(), opened() as conn:
            yield conn

    def _open_read(self) -> AbstractContextManager[Connection]:
        # One snapshot per read: a deferred transaction, so a multi-statement read is consistent.
        return self._read_engine.begin()

    def _search_clause(self, param: sa.BindParameter[Any]) -> sa.ColumnElement[bool]:
        matches: sa.Select[Any] = (
            sa.select(sa.literal_column("rowid"))
            .select_from(sa.table("memories_fts"))
            .where(sa.literal_column("memories_fts").op("MATCH")(param))
        )
        return memories.c.pk.in_(matches)

    def _cuts_pool(self, audience: Audience) -> bool:
        # FTS5 walks a MATCH's entries newest (highest rowid) first and scores only those it
        # returns: the pool is cut on the audience's scope token, where every entry is of the
        # audience's own tenant (an agent's, a room's, an organization's). A subject's token is
        # carried by every tenant's memories about the person, and without a token the
        # entries are every tenant's: another tenant's writes would fill the pool, so every
        # match is scored there. The audience's other conditions apply after the cut
        # (`SqlStore.rank_memories` scores every match of an audience they leave too few).
        return narrowest_owner(audience) not in (None, "subject_id")

    def _search_rank(
        self,
        param: sa.BindParameter[Any],
        pool: int | None,
        audience: Audience,  # noqa: ARG002 (the MATCH holds its scope token: `_search_value`)
        index: int,
        walk: bool,  # noqa: ARG002 (FTS5 reads the token's entries newest first: one plan)
    ) -> tuple[
        sa.FromClause, sa.ColumnElement[bool], sa.ColumnElement[float], sa.FromClause | None
    ]:
        # The matches are looked up in FTS5 alone (LIMIT -1 keeps them a subquery of their own,
        # not flattened into the join), then joined to their memories, and each scored from its
        # own row (`RELEVANCE_FUNCTION`): no statistic of the index, which counts every tenant's
        # memories. A pool is cut here (`_cuts_pool`), before the filters: they may keep fewer
        # than `pool`. Its hits are materialized: joined, and counted (`SqlStore.rank_memories`).
        fts: sa.ColumnClause[Any] = sa.literal_column("memories_fts")
        rowid: sa.ColumnClause[Any] = sa.literal_column("rowid")
        hits = (
            sa.select(rowid.label("pk"))
            .select_from(sa.table("memories_fts"))
            .where(fts.op("MATCH")(param))
            .order_by(rowid.desc() if pool else None)
            .limit(sa.literal_column(str(pool or -1)))
        )
        score = getattr(sa.func, RELEVANCE_FUNCTION)(
            memories.c.search_text, param, type_=sa.Float()
        )
        if pool is None:
            scored = hits.subquery("hits")
            return memories.join(scored, scored.c.pk == memories.c.pk), sa.true(), score, None
        pooled = hits.cte(f"hits{index}").prefix_with("MATERIALIZED")
        source = memories.join(pooled, pooled.c.pk == memories.c.pk)
        return source, sa.true(), score, pooled

    def _search_value(self, search: SearchQuery, audience: Audience) -> str:
        return fts5_query(search, audience)

    def _term_stats(self, conn: Connection, search: SearchQuery) -> TermStats | None:
        # Estimates need not be fresh: each range's pages are kept for `STATS_SECONDS`. The
        # request threads share the caches without a lock: an expiry replaces them (never
        # clears them in place), and a search fills and reads the ones it took, so another
        # search's expiry meanwhile cannot take its ranges away (review17, finding 7).
        now = time.monotonic()
        cached = len(self._pages) + len(self._counted)
        if now - self._stats_at > STATS_SECONDS or cached > MAX_CACHED_RANGES:
            self._pages, self._counted = {}, {}
            # A statistic of the whole file: SQLite is one node, never sharded.
            most = f"SELECT {EVERY_TENANT} max(pk) FROM memories"
            self._rows = int(conn.exec_driver_sql(most).scalar() or 0)
            self._stats_at = now
        pages, counts, rows = self._pages, self._counted, self._rows
        ranges = term_ranges(search)
        missing = list({span for spans in ranges for span in spans if span not in pages})
        if missing:
            values = ", ".join("(?, ?, ?)" for _ in missing)
            params = tuple(value for k, span in enumerate(missing) for value in (k, *span))
            found: dict[int, Any] = dict(
                conn.exec_driver_sql(TERM_PAGES_SQL.format(values=values), params).all()
            )
            for k, span in enumerate(missing):
                pages[span] = max(int(found.get(k) or 0), 0)
        postings = [sum(pages[span] for span in spans) * DOCS_PER_PAGE for spans in ranges]
        # Pages overcount a term that starts inside the page run of a common term sorted just
        # before it (`%_idx` lists only the first term starting on each page): a term that looks
        # too common to look up is counted in the index, reading at most DRIVER_POSTINGS + 1
        # entries, and the count (kept like the pages) replaces the estimate when it is smaller.
        deadline = time.monotonic() + COUNT_BUDGET_SECONDS  # counting only, as documented
        for index, part in enumerate(search.parts()):
            if postings[index] <= DRIVER_POSTINGS:
                continue
            expression = fts5_query(part)
            counted = counts.get(expression)
            if counted is None:
                counted = _count_entries(conn, expression, deadline - time.monotonic())
                if counted is None:  # no time left: too common for this search only
                    continue  # (a cut count kept would refuse every tenant: review18, 6)
                counts[expression] = counted
            postings[index] = min(postings[index], counted)
        return TermStats(rows, tuple(postings))

    def _audience_matches(
        self, conn: Connection, query: MemoryQuery, audience: Audience, part: SearchQuery, most: int
    ) -> int:
        # The index's work of the audience's lookup: the MATCH with its scope token, streamed
        # (the statement of `SqlStore` would read the whole MATCH before its LIMIT): every entry
        # carrying the token is the audience's own tenant's. An audience with no token (a
        # person's own agents in their rooms) would count every tenant's entries of the term, so
        # another tenant's words could refuse its search: it is counted as `SqlStore` counts it,
        # on its rows (its tenant and owners), reading what its own lookup reads. Both within the
        # search's budget: a count past it refuses the search as too expensive.
        if scope_token(audience) is None:
            return super()._audience_matches(conn, query, audience, part, most)
        return _entries(conn, fts5_query(part, audience), most)

    def _recheck_values(self, search: SearchQuery) -> dict[str, Any]:
        return recheck_values(search)

    def _recheck_clause(self, names: tuple[str, ...]) -> sa.ColumnElement[bool]:
        text = sa.literal(" ") + memories.c.search_text
        spaced = text + sa.literal(" ")
        return sa.and_(
            *(
                sa.func.instr(
                    text if name[len(RECHECK_PREFIX)] == "p" else spaced,
                    sa.bindparam(name, type_=sa.String()),
                )
                > 0
                for name in names
            )
        )

    @contextmanager
    def _search_budget(self, conn: Connection) -> Iterator[None]:
        # The process's watchdog interrupts the statement at the deadline: "interrupted", or
        # "vtable constructor failed" when it comes while the statement is being prepared.
        token = WATCHDOG.watch(driver_connection(conn), self._search_budget_ms / 1000)
        try:
            yield
        except sa.exc.OperationalError as exc:
            if WATCHDOG.release(token):
                raise SearchTooExpensive(details={"budget_ms": self._search_budget_ms}) from exc
            raise
        finally:
            WATCHDOG.release(token)

    def _candidates_in(self, column: sa.Column[Any]) -> sa.ColumnElement[bool]:
        # One JSON array parameter (`json_each`): the statement's text is the same whatever the
        # count, so it is compiled once (by SQLAlchemy and by SQLite's statement cache), where
        # IN renders and parses one placeholder per key.
        keys = sa.func.json_each(sa.bindparam("candidates", type_=JsonKeys())).table_valued("value")
        return column.in_(sa.select(keys.c.value))

    def _blob_rows(self, conn: Connection, name: str, params: dict[str, Any]) -> Sequence[Any]:
        # On sqlite3's own cursor (same connection and transaction): SQLAlchemy's execution and
        # row processing cost more than SQLite's reading of the rows (measured: the chunks of
        # one agent of 10,000 memories in 0.46 ms through SQLAlchemy, 0.20 ms raw).
        sql = blob_sql(name, len(params["tenants"]), len(params.get("owners", ())))
        rows: list[Any] = driver_connection(conn).execute(sql, blob_params(params)).fetchall()
        return rows

    def _insert_ignore(self, table: sa.Table) -> Insert:
        return sqlite_insert(table).on_conflict_do_nothing()

    def _delete_counted(self, conn: Connection, statement: Delete) -> tuple[int, Keys, Layouts]:
        # The vector tables' foreign keys cascade (`_forget_vectors`): only the count is read,
        # and the owners just before (one writer: nobody seals a chunk in between).
        # FTS5 merges no segments meanwhile (`FTS_AUTOMERGE`); it does again from the next
        # write on, a little at each.
        assert statement.whereclause is not None  # an erasure names whose memories
        owners = self._vector_owners(conn, statement.whereclause)
        conn.exec_driver_sql(FTS_AUTOMERGE, (0,))
        try:
            return int(conn.execute(statement).rowcount), {}, owners
        finally:
            conn.exec_driver_sql(FTS_AUTOMERGE, (FTS_DEFAULT_AUTOMERGE,))

    def _forget_vectors(self, conn: Connection, keys: Keys) -> None:  # noqa: ARG002
        return None  # their foreign keys to `memories` cascade, in the delete's own statement

    def _keys_freed(self, conn: Connection, keys: Keys) -> None:
        # `memories.pk` is the rowid (no AUTOINCREMENT): the next memory stored takes the
        # largest pk left plus one, so deleted pks above it will name other memories. Only
        # deleting the newest memories does that (one max() lookup says whether it did).
        if not keys:
            return
        most = conn.exec_driver_sql(f"SELECT {EVERY_TENANT} max(pk) FROM memories").scalar()
        for tenant, pks in keys.items():
            freed = {pk for pk in pks if pk > (most or 0)}
            if freed:
                self._purge_keys(conn, tenant, freed)

    def integrity_check(self) -> str:
        """SQLite's own verdict on the file ('ok' when sound)."""
        with self._read() as conn:
            return str(conn.exec_driver_sql("PRAGMA integrity_check").scalar_one())
