"""The SQL implementation of `Store`, shared by SQLite and PostgreSQL.

Backends differ only in how they open connections (`_read`, `_write`), how they match and rank a
full-text query (`_search_clause`, `_search_rank`) and how they insert-or-ignore
(`_insert_ignore`): see `sql_base.py`. What each audience field and filter means in SQL is in
`sql_conditions.py`.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mnemos.domain.history import SERVER, STATUS_EVENTS
from mnemos.domain.models import ChangedBy, HistoryEvent, Memory, Status
from mnemos.domain.pagination import Position
from mnemos.domain.queries import FILTER_NAMES, Audience, MemoryQuery, Order
from mnemos.domain.rooms import not_in_room
from mnemos.domain.search import Scored, SearchQuery
from mnemos.domain.tenants import Tenants
from mnemos.errors import Conflict, SearchTooExpensive, Unauthorized
from mnemos.storage.base import Store
from mnemos.storage.history_rows import history_row, record, status_change
from mnemos.storage.rows import MEMORY_COLUMNS, MEMORY_FIELDS, memory_values, to_memory
from mnemos.storage.schema import (
    UTCDateTime,
    agents,
    chat_participants,
    idempotency_keys,
    memories,
)
from mnemos.storage.search_plan import (
    WALK_MAX_AUDIENCES,
    WALK_ROWS,
    SearchPlan,
    own_plan,
    plan_search,
)
from mnemos.storage.sql_accounts import AccountsSql, agent_held
from mnemos.storage.sql_base import EVERY_TENANT, replica_read
from mnemos.storage.sql_conditions import (
    AUDIENCE_SQL,
    FILTER_SQL,
    FieldSql,
    audience_values,
    filter_values,
    in_tenants,
    tenants_of,
)
from mnemos.storage.sql_rights import RightsSql
from mnemos.storage.sql_rooms import RoomsSql
from mnemos.storage.sql_tuya import TuyaSql
from mnemos.storage.sql_vectors import VectorsSql

M = memories.c
P = chat_participants.c


def _insert_memory() -> sa.Insert:
    """A memory, inserted only while its source agent (if any) exists and, stored into a room,
    has a seat in it; the insert holds both rows (`FOR KEY SHARE`, PostgreSQL; SQLite writes
    one at a time) until the store commits. `delete_agent` locks the agent's row first
    (`agent_held`), and leaving a room deletes the seat: a store either commits before them (and
    its memory is deleted, kept, or stays in the room as every earlier one does) or finds no
    agent, or no seat, and inserts nothing (review17 finding 5). One statement, as the plain
    insert was: the checks cost no round trip."""
    stored = (*MEMORY_FIELDS, "search_text")  # the keys of `memory_values`
    values = {name: sa.bindparam(name, type_=M[name].type) for name in stored}
    source, room = values["source_agent_id"], values["chat_room_id"]
    seat = sa.select(P.id).where(P.chat_room_id == room, P.participant_id == source)
    live = sa.and_(
        sa.or_(source.is_(None), sa.exists(agent_held(source))),
        sa.or_(room.is_(None), sa.exists(seat.with_for_update(read=True, key_share=True))),
    )
    inserted = memories.insert().from_select(stored, sa.select(*values.values()).where(live))
    return inserted.returning(M.id)  # SQLAlchemy over psycopg gave it no rowcount (-1)


# Built once: the row goes in as the statement's parameters, so a store builds no statement and
# its compiled form is found in the cache by a key computed once (not one per row's values).
INSERT_MEMORY = _insert_memory()


def _insert_by_agent(conn: Connection, row: dict[str, Any]) -> None:
    """`row`, an agent's memory; refused as the agent's key is once the agent is deleted (its
    request was authenticated before the deletion committed), and as a store into a room the
    agent is not in once it left the room (after its store checked its seat)."""
    if conn.execute(INSERT_MEMORY, row).first() is not None:
        return
    agent = sa.select(agents.c.id).where(agents.c.id == row["source_agent_id"])
    if row["chat_room_id"] is not None and conn.execute(agent).first() is not None:
        raise not_in_room()
    raise Unauthorized("Invalid API key")


class SqlStore(AccountsSql, RoomsSql, TuyaSql, VectorsSql, RightsSql, Store):
    """A `Store` over SQLAlchemy Core; subclasses supply the dialect's differences."""

    def insert_memory(self, memory: Memory, *, by: ChangedBy | None = None) -> None:
        row = memory_values(memory)
        with self._write() as conn:
            _insert_by_agent(conn, row)
            self._note_inserted(conn, [row])
            record(conn, [_created(memory, by)])

    def insert_memory_once(
        self,
        memory: Memory,
        principal_id: uuid.UUID,
        key: str,
        fingerprint: str,
        ttl: timedelta,
        *,
        by: ChangedBy | None = None,
    ) -> tuple[uuid.UUID, str]:
        keys = idempotency_keys.c
        tenant = memory.tenant_id  # the agent's, whose key it is
        mine = sa.and_(keys.tenant_id == tenant, keys.principal_id == principal_id, keys.key == key)
        with self._write() as conn:
            conn.execute(
                idempotency_keys.delete().where(mine, keys.inserted_at < memory.inserted_at - ttl)
            )
            claimed = conn.execute(
                self._insert_ignore(idempotency_keys)
                .values(
                    tenant_id=tenant,
                    principal_id=principal_id,
                    key=key,
                    fingerprint=fingerprint,
                    memory_id=memory.id,
                    inserted_at=memory.inserted_at,
                )
                .returning(keys.memory_id)
            ).first()
            if claimed is not None:
                values = memory_values(memory)
                _insert_by_agent(conn, values)  # a deleted agent's claim is rolled back
                self._note_inserted(conn, [values])
                record(conn, [_created(memory, by)])
                return memory.id, fingerprint
            row = conn.execute(sa.select(keys.memory_id, keys.fingerprint).where(mine)).one()
        return row[0], row[1]

    def forget_idempotency_keys(self, before: datetime, batch: int) -> int:
        keys = idempotency_keys.c
        key = sa.tuple_(keys.tenant_id, keys.principal_id, keys.key)
        # Keys of every tenant: the sweep is the server's, and answers no one.
        oldest = (
            sa.select(keys.tenant_id, keys.principal_id, keys.key)
            .prefix_with(EVERY_TENANT)
            .where(keys.inserted_at < before)
            .order_by(keys.inserted_at)
            .limit(batch)
        )
        with self._write() as conn:
            return conn.execute(idempotency_keys.delete().where(key.in_(oldest))).rowcount

    @replica_read
    def get_memory(self, memory_id: uuid.UUID, tenants: Tenants) -> Memory | None:
        query = sa.select(*MEMORY_COLUMNS).where(in_tenants(memories, tenants), M.id == memory_id)
        with self._read() as conn:
            row = conn.execute(query).first()
        return to_memory(row) if row else None

    @replica_read
    def memory_exists(self, memory_id: uuid.UUID) -> bool:
        # The one read of memories across every tenant (docs/deploying.md): marked for the
        # suite's check of tenant filters (tests/tenant_filter.py).
        query = sa.select(sa.literal(1)).prefix_with(EVERY_TENANT).where(M.id == memory_id)
        with self._read() as conn:
            return conn.execute(query.limit(1)).first() is not None

    def set_memory_status(
        self,
        tenant_id: uuid.UUID,
        memory_id: uuid.UUID,
        status: Status,
        now: datetime,
        *,
        by: ChangedBy | None = None,
        only_from: Status | None = None,
    ) -> Memory | None:
        this = sa.and_(M.tenant_id == tenant_id, M.id == memory_id)
        allowed = M.status != status.value if only_from is None else M.status == only_from.value
        try:
            with self._write() as conn:
                # A memory that has the status already is left as it is: no history row (any
                # caller could otherwise grow a person's history by repeating a request). The
                # status a change is allowed from is checked here, not on an earlier read: a
                # supersede committed meanwhile is not undone by a restore (review17).
                changed = conn.execute(
                    memories.update()
                    .where(this, allowed)
                    .values(status_change(status, now))
                    .returning(M.subject_id)
                ).first()
                if changed is not None:
                    event, actor = STATUS_EVENTS[status], by or SERVER
                    record(conn, [history_row(tenant_id, memory_id, changed[0], event, actor, now)])
                row = conn.execute(sa.select(*MEMORY_COLUMNS).where(this)).first()
        except sa.exc.IntegrityError:  # restoring a Tuya value whose key has a newer active one
            raise Conflict("Another value of this memory's key is active") from None
        return to_memory(row) if row else None

    def delete_memory(
        self, tenant_id: uuid.UUID, memory_id: uuid.UUID, *, by: ChangedBy | None = None
    ) -> bool:
        return self.delete_memories(tenant_id, [memory_id], by=by) == 1

    def delete_memories(
        self, tenant_id: uuid.UUID, memory_ids: list[uuid.UUID], *, by: ChangedBy | None = None
    ) -> int:
        if not memory_ids:
            return 0
        where = sa.and_(M.tenant_id == tenant_id, M.id.in_(memory_ids))
        with self._write() as conn:
            return self._delete_memories(conn, where, by or SERVER)

    def replace_memories(
        self,
        tenant_id: uuid.UUID,
        new: list[Memory],
        superseded: list[uuid.UUID],
        now: datetime,
        *,
        by: ChangedBy | None = None,
    ) -> None:
        with self._write() as conn:
            if superseded:
                gone = conn.execute(
                    memories.update()
                    .where(M.tenant_id == tenant_id, M.id.in_(superseded))
                    .where(M.status == Status.ACTIVE.value)
                    .values(status_change(Status.SUPERSEDED, now))
                    .returning(M.id, M.subject_id)
                ).all()
                event, actor = HistoryEvent.SUPERSEDED, by or SERVER
                record(conn, (history_row(tenant_id, i, s, event, actor, now) for i, s in gone))
            if new:
                rows = [memory_values(m) for m in new]
                conn.execute(memories.insert(), rows)
                self._note_inserted(conn, rows)
                record(conn, (_created(m, by) for m in new))

    # --- lists -----------------------------------------------------------------------------
    #
    # A list's SQL depends only on the query's shape (which fields are set), never on its values,
    # so each shape is built once and cached with named bound parameters; a request only computes
    # the parameters. Building a SELECT costs SQLAlchemy more than SQLite takes to run it.

    def list_statement(
        self,
        query: MemoryQuery,
        *,
        limit: int,
        after: Position | None = None,
        offset: int = 0,
        plan: SearchPlan | None = None,
    ) -> tuple[sa.Select[Any], dict[str, Any]]:
        """The SELECT behind `list_memories` and its parameters (also used to show plans); with a
        `plan`, the index looks up only its driver terms and the rows found are checked for all."""
        union = len(query.audiences) > 1
        params = self._list_params(query, after, plan)
        shape = self._shape("list", query, params)
        params["limit"] = limit
        params["offset"] = offset
        if union:
            params["depth"] = limit + offset
        statement = self._statements.get(shape)
        if statement is None:
            recheck = _recheck_names(params)
            if union:
                keys = self._matching_keys(query, after is not None, depth=True, recheck=recheck)
                statement = sa.select(*MEMORY_COLUMNS).join(
                    keys, sa.and_(keys.c.tenant_id == M.tenant_id, keys.c.id == M.id)
                )
            else:
                statement = sa.select(*MEMORY_COLUMNS).where(
                    *self._branch_conditions(query, 0, after is not None, recheck=recheck)
                )
            statement = (
                statement.order_by(M.inserted_at.desc(), M.id.desc())
                .limit(sa.bindparam("limit", type_=sa.Integer()))
                .offset(sa.bindparam("offset", type_=sa.Integer()))
            )
            self._statements.put(shape, statement)
        return statement, params

    @replica_read
    def list_memories(
        self,
        query: MemoryQuery,
        *,
        limit: int,
        after: Position | None = None,
        offset: int = 0,
    ) -> Sequence[Memory]:
        if query.order is not Order.NEWEST:
            raise ValueError("list_memories is newest first: rank_memories ranks")
        if not query.audiences:
            return []
        if query.search is None:
            statement, params = self.list_statement(query, limit=limit, after=after, offset=offset)
            with self._read() as conn:
                return [to_memory(row) for row in conn.execute(statement, params)]
        with self._search_read() as conn, self._search_budget(conn):
            stats = self._term_stats(conn, query.search)
            plan = plan_search(query.search, stats, limit + offset)
            if plan.walk and len(query.audiences) <= WALK_MAX_AUDIENCES:
                walked = self._walk(conn, query, limit + offset, after)
                if walked is not None:
                    return walked[offset:]
            if plan.driver is None and stats is not None:
                # Too common in every tenant's memories: perhaps not in the caller's own.
                count = functools.partial(self._own_matches, conn, query)
                plan = own_plan(query.search, stats, limit + offset, count)
            if plan.driver is None:
                raise SearchTooExpensive(TOO_COMMON, details={"reason": "words_too_common"})
            statement, params = self.list_statement(
                query, limit=limit, after=after, offset=offset, plan=plan
            )
            return [to_memory(row) for row in conn.execute(statement, params)]

    def _walk(
        self, conn: Connection, query: MemoryQuery, limit: int, after: Position | None
    ) -> list[Memory] | None:
        """The newest `limit` matches, read off the newest `WALK_ROWS` rows of each audience
        (every term checked on the row); None when some audience has more rows than that and
        they held fewer than `limit` matches (the answer may lie further back)."""
        assert query.search is not None
        recheck = self._recheck_values(query.search)
        found: dict[uuid.UUID, Memory] = {}
        for audience in query.audiences:
            single = dataclasses.replace(query, audiences=(audience,), search=None)
            bare = dataclasses.replace(single, **UNFILTERED)
            edge_params = self._list_params(bare, after)
            edge = conn.execute(self._walk_edge(bare, edge_params), edge_params).first()
            params = self._list_params(single, after)
            params.update(recheck, limit=limit)
            if edge is not None:
                params.update(edge_at=edge[0], edge_id=edge[1])
            statement = self._walk_statement(single, params, edge is not None)
            rows = [to_memory(row) for row in conn.execute(statement, params)]
            if edge is not None and len(rows) < limit:
                return None
            found.update((memory.id, memory) for memory in rows)
        newest = sorted(found.values(), key=lambda m: (m.inserted_at, m.id), reverse=True)
        return newest[:limit]

    def _own_matches(
        self, conn: Connection, query: MemoryQuery, part: SearchQuery, most: int
    ) -> int:
        """How many memories of the query's audiences (not its filters) match `part`, read
        up to `most` + 1, each audience as its newest-first search looks it up in the index."""
        total = 0
        for audience in query.audiences:
            total += self._audience_matches(conn, query, audience, part, most + 1 - total)
            if total > most:
                break
        return total

    def _audience_matches(
        self, conn: Connection, query: MemoryQuery, audience: Audience, part: SearchQuery, most: int
    ) -> int:
        """How many of one audience's memories match `part`, read up to `most`."""
        bare = {**UNFILTERED, "search": part}
        single = dataclasses.replace(query, audiences=(audience,), **bare)
        params = self._list_params(single, None)
        params["most"] = most
        shape = self._shape("own-matches", single, params)
        statement = self._statements.get(shape)
        if statement is None:
            found = (
                sa.select(M.pk)
                .where(*self._branch_conditions(single, 0, False))
                .limit(sa.bindparam("most", type_=sa.Integer()))
                .subquery()
            )
            statement = sa.select(sa.func.count()).select_from(found)
            self._statements.put(shape, statement)
        return int(conn.execute(statement, params).scalar_one())

    def _walk_edge(self, single: MemoryQuery, params: dict[str, Any]) -> sa.Select[Any]:
        """`(inserted_at, id)` of the `WALK_ROWS`-th newest row of a one-audience query (none if
        it has fewer). With no filters (`UNFILTERED`) it is read off the audience's ordered index
        alone; the walk then applies the filters to at most `WALK_ROWS` rows."""
        shape = self._shape("walk-edge", single, params)
        statement = self._statements.get(shape)
        if statement is None:
            statement = (
                sa.select(M.inserted_at, M.id)
                .where(*self._branch_conditions(single, 0, "after_at" in params))
                .order_by(M.inserted_at.desc(), M.id.desc())
                .limit(1)
                .offset(WALK_ROWS - 1)
            )
            self._statements.put(shape, statement)
        return statement

    def _walk_statement(
        self, single: MemoryQuery, params: dict[str, Any], edged: bool
    ) -> sa.Select[Any]:
        """The newest matches of a one-audience query, no older than its walk edge (if any)."""
        shape = (*self._shape("walk", single, params), edged)
        statement = self._statements.get(shape)
        if statement is None:
            conditions = self._branch_conditions(
                single, 0, "after_at" in params, recheck=_recheck_names(params)
            )
            if edged:
                conditions.append(
                    sa.tuple_(M.inserted_at, M.id)
                    >= sa.tuple_(
                        sa.bindparam("edge_at", type_=UTCDateTime()),
                        sa.bindparam("edge_id", type_=sa.Uuid()),
                    )
                )
            statement = (
                sa.select(*MEMORY_COLUMNS)
                .where(*conditions)
                .order_by(M.inserted_at.desc(), M.id.desc())
                .limit(sa.bindparam("limit", type_=sa.Integer()))
            )
            self._statements.put(shape, statement)
        return statement

    @replica_read
    def rank_memories(
        self, query: MemoryQuery, *, limit: int, pool: int | None = None
    ) -> Sequence[Scored]:
        if query.search is None or query.order is not Order.RELEVANCE:
            raise ValueError("rank_memories needs a search in relevance order")
        if not query.audiences:
            return []
        cuts = tuple(pool is not None and self._cuts_pool(a) for a in query.audiences)
        params = self._list_params(query, None)
        params["limit"] = limit
        with self._search_read() as conn, self._search_budget(conn):
            # Only how the pool is found (`_walks_pool`), never which rows it holds.
            walk = any(cuts) and self._walks_pool(conn, query.search)
            found, counts = self._ranked(conn, query, params, pool, cuts, walk)
            # A pool is cut on the owner's index entries, before the audience's other
            # conditions (its scopes, a second owner) and the filters: where they leave one
            # cut audience fewer than `limit`, and the pool left matches out (it is full),
            # every match of that audience is scored, so a pool never shortens an answer.
            # Each audience by its own counts: another audience's matches (another tenant's
            # memories about a person) must not decide it.
            short = tuple(
                cut and kept < limit and size >= (pool or 0)
                for cut, (kept, size) in zip(cuts, counts, strict=True)
            )
            if any(short):
                cuts = tuple(cut and not s for cut, s in zip(cuts, short, strict=True))
                found, _ = self._ranked(conn, query, params, pool, cuts, walk)
            return found

    def _ranked(
        self,
        conn: Connection,
        query: MemoryQuery,
        params: dict[str, Any],
        pool: int | None,
        cuts: tuple[bool, ...],
        walk: bool,
    ) -> tuple[list[Scored], tuple[tuple[int, int], ...]]:
        """The ranking, and for each audience how many rows its pool kept after the
        audience's conditions and how many it held (0 and 0 for an audience not cut)."""
        # Which audiences are cut is part of the shape: the parameters' names do not always
        # tell it (PostgreSQL cuts an organization's audience of one scope only).
        shape = (*self._shape("rank", query, params), pool if any(cuts) else None, cuts, walk)
        statement = self._statements.get(shape)
        if statement is None:
            statement = self._ranked_statement(query, pool, cuts, walk)
            self._statements.put(shape, statement)
        rows = conn.execute(statement, params).all()
        found = [Scored(row[1], float(row[0])) for row in rows if row[1] is not None]
        counts = iter(rows[0][2:] if any(cuts) else ())
        return found, tuple(
            (int(next(counts)), int(next(counts))) if cut else (0, 0) for cut in cuts
        )

    def _ranked_statement(
        self, query: MemoryQuery, pool: int | None, cuts: tuple[bool, ...], walk: bool
    ) -> sa.Select[Any]:
        """`(score, id, counts...)` of the best matches: each audience's matches (its newest
        `pool`, where `cuts` says so) scored, a memory in several audiences counted once,
        ordered by `(score, id)` descending (the rows of the few a page returns are read after
        it is cut); `counts`, two columns per cut audience: how many rows its pool kept after
        the audience's conditions, and how many it held (each materialized once)."""
        branches: list[sa.Select[Any]] = []
        counts: list[sa.ScalarSelect[Any]] = []
        for index, audience in enumerate(query.audiences):
            param: sa.BindParameter[Any] = sa.bindparam(f"a{index}_search")
            cut = pool if cuts[index] else None
            source, match, score, rows = self._search_rank(param, cut, audience, index, walk)
            branch = (
                sa.select(
                    M.tenant_id.label("tenant_id"),
                    M.id.label("id"),
                    sa.cast(score, sa.Float()).label("score"),
                )
                .select_from(source)
                .where(match, *self._branch_conditions(query, index, after=False, search=False))
            )
            if cut is not None:
                assert rows is not None  # a pool's rows
                pooled = branch.cte(f"pooled{index}").prefix_with("MATERIALIZED")
                for counted in (pooled, rows):
                    counts.append(sa.select(sa.func.count()).select_from(counted).scalar_subquery())
                branch = sa.select(pooled.c.tenant_id, pooled.c.id, pooled.c.score)
            branches.append(branch)
        scored = sa.union_all(*branches).subquery("scored")
        best = (
            sa.select(scored.c.tenant_id, scored.c.id, sa.func.max(scored.c.score).label("score"))
            .group_by(scored.c.tenant_id, scored.c.id)
            .subquery("ranked")
        )
        top = (
            sa.select(best.c.score, best.c.id)
            .order_by(best.c.score.desc(), best.c.id.desc())
            .limit(sa.bindparam("limit", type_=sa.Integer()))
        )
        if not counts:
            return top
        # The counts on every row, and on one row of NULLs when nothing matched.
        ranked = top.subquery("top")
        counted = sa.select(*(c.label(f"n{i}") for i, c in enumerate(counts))).subquery("n")
        return (
            sa.select(ranked.c.score, ranked.c.id, *counted.c)
            .select_from(counted.outerjoin(ranked, sa.true()))
            .order_by(ranked.c.score.desc(), ranked.c.id.desc())
        )

    def _checked(
        self, query: MemoryQuery, with_ids: bool, candidates: bool = True
    ) -> tuple[sa.Select[Any], dict[str, Any]]:
        params = self._list_params(query, None)
        shape = (*self._shape("checked", query, params), with_ids, candidates)
        statement = self._statements.get(shape)
        if statement is None:
            visible = sa.or_(
                *(
                    sa.and_(*self._branch_conditions(query, index, after=False))
                    for index in range(len(query.audiences))
                )
            )
            columns = (M.pk, M.id) if with_ids else (M.pk,)
            statement = sa.select(*columns).where(visible)
            if candidates:
                statement = statement.where(self._candidates_in(M.pk))
            self._statements.put(shape, statement)
        return statement, params

    @replica_read
    def count_memories(self, query: MemoryQuery) -> int:
        if not query.audiences:
            return 0
        params = self._list_params(query, None)
        shape = self._shape("count", query, params)
        statement = self._statements.get(shape)
        if statement is None:
            keys = self._matching_keys(query, after=False, depth=False)
            statement = sa.select(sa.func.count()).select_from(keys)
            self._statements.put(shape, statement)
        if query.search is None:
            with self._read() as conn:
                return int(conn.execute(statement, params).scalar_one())
        with self._search_read() as conn, self._search_budget(conn):
            return int(conn.execute(statement, params).scalar_one())

    @staticmethod
    def _shape(kind: str, query: MemoryQuery, params: dict[str, Any]) -> tuple[Any, ...]:
        """Which parts of a query are set, read off the names of its parameters (each names the
        audience, filter, search or keyset position it binds): equal shapes have equal SQL."""
        return (kind, tuple(params), tuple(a.without_subject for a in query.audiences))

    def _list_params(
        self, query: MemoryQuery, after: Position | None, plan: SearchPlan | None = None
    ) -> dict[str, Any]:
        params = {f"f_{name}": value for name, value in filter_values(query)}
        search = plan.driver if plan is not None else query.search
        for i, audience in enumerate(query.audiences):
            for name, value in audience_values(audience):
                params[f"a{i}_{name}"] = value
            if search is not None:
                params[f"a{i}_search"] = self._search_value(search, audience)
        if plan is not None and plan.recheck and query.search is not None:
            params.update(self._recheck_values(query.search))
        if after is not None:
            params["after_at"] = after.inserted_at
            params["after_id"] = after.id
        return params

    def _branch_conditions(
        self,
        query: MemoryQuery,
        index: int,
        after: bool,
        search: bool = True,
        recheck: tuple[str, ...] = (),
    ) -> list[sa.ColumnElement[bool]]:
        """Audience `index` of the query, its filters, its search (unless `search` is False: a
        ranked branch matches it in its own FROM), the check of every term on the row (bound to
        the `recheck` parameters) and the keyset position."""
        audience = query.audiences[index]
        conditions = [
            _condition(AUDIENCE_SQL, name, f"a{index}_{name}")
            for name, _ in audience_values(audience)
        ]
        if audience.tenant_id is None:  # what is about a subject: the tenants holding some
            conditions.append(M.tenant_id.in_(tenants_of(sa.bindparam(f"a{index}_subject_id"))))
        if audience.without_subject:
            conditions.append(M.subject_id.is_(None))
        conditions += [
            _condition(FILTER_SQL, name, f"f_{name}") for name, _ in filter_values(query)
        ]
        if search and query.search is not None:
            conditions.append(self._search_clause(sa.bindparam(f"a{index}_search")))
        if recheck:
            conditions.append(self._recheck_clause(recheck))
        if after:
            conditions.append(
                sa.tuple_(M.inserted_at, M.id)
                < sa.tuple_(
                    sa.bindparam("after_at", type_=UTCDateTime()),
                    sa.bindparam("after_id", type_=sa.Uuid()),
                )
            )
        return conditions

    def _matching_keys(
        self, query: MemoryQuery, after: bool, depth: bool, recheck: tuple[str, ...] = ()
    ) -> sa.Subquery:
        """`(inserted_at, id, tenant_id)` of every match: one newest-first branch per audience,
        unioned.

        Each branch can walk its own index in order and stop after `depth` rows, so a page of a
        union of audiences costs a few short index scans instead of one filtered sort.
        """
        branches = []
        for index in range(len(query.audiences)):
            branch = sa.select(M.inserted_at, M.id, M.tenant_id).where(
                *self._branch_conditions(query, index, after, recheck=recheck)
            )
            if depth:
                branch = branch.order_by(M.inserted_at.desc(), M.id.desc()).limit(
                    sa.bindparam("depth", type_=sa.Integer())
                )
            inner = branch.subquery()
            branches.append(sa.select(inner.c.inserted_at, inner.c.id, inner.c.tenant_id))
        return sa.union(*branches).subquery("matches")


UNFILTERED: dict[str, Any] = {
    **{name: None for name in FILTER_NAMES if name != "statuses"},
    "statuses": tuple(Status),
}
RECHECK_PREFIX = "rc_"  # names of the parameters of `_recheck_clause`
TOO_COMMON = (
    "Every word of this search is in too many memories to look up, and they are rarely "
    "together: add a rarer word, or narrow the list with memory_scope or filters"
)


def _recheck_names(params: dict[str, Any]) -> tuple[str, ...]:
    return tuple(name for name in params if name.startswith(RECHECK_PREFIX))


def _created(memory: Memory, by: ChangedBy | None) -> dict[str, Any]:
    return history_row(
        memory.tenant_id,
        memory.id,
        memory.subject_id,
        HistoryEvent.CREATED,
        by or SERVER,
        memory.inserted_at,
    )


def _condition(table: dict[str, FieldSql | None], name: str, key: str) -> sa.ColumnElement[bool]:
    """Field `name`'s condition on the parameter bound as `key`."""
    entry = table[name]
    assert entry is not None  # only fields with SQL are ever bound
    return entry.condition(sa.bindparam(key, expanding=entry.expanding))
