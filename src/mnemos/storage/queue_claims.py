"""The embedding queue's claim, shared between tenants (`VectorsSql.claim_unembedded`;
docs/decisions.md, "The embedding worker shares its time between tenants"): its statements,
built once, and `fair_batch`, which decides which of the memories they found one claim takes.

A claim reads the newest free queued memories (`NEWEST`), walks the next tenants with queued
memories from where the last claim's round stopped (`TENANT_WALK`), and reads each one's newest
(`newest_of`). Every statement walks an index: the newest through `ix_vector_queue_order`
(PostgreSQL, migration 0022) or the rowid (SQLite), the tenants through the queue's
`(tenant_id, memory_pk)` key (PostgreSQL's primary key, SQLite's `uq_vector_queue_tenant_key`).
"""

from __future__ import annotations

import functools
import itertools
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa

from mnemos.storage.schema import vector_queue
from mnemos.storage.sql_base import EVERY_TENANT

Q = vector_queue.c

ROUND_TENANTS = 32
"""The most tenants one claim of the embedding queue goes round: its work stays bounded however
many tenants wait (the worker's batch of 8 reaches 7 a claim; a reindex's batch of up to 1,024
shares its places among 32 at a time)."""

Queued = tuple[uuid.UUID, int]
"""A queued memory: its tenant and pk."""


def fair_batch(
    newest: Sequence[Queued], turn: Sequence[uuid.UUID], shares: Iterable[Queued], limit: int
) -> list[Queued]:
    """The memories one claim takes, at most `limit`: the newest queued one (`newest`, newest
    first), then the newest of each tenant of the round (`turn`, in order: each tenant's
    `shares`), the tenants' first ones first, then their second ones, ...; places left over go
    to the rest of `newest`."""
    by_tenant: dict[uuid.UUID, list[int]] = {tenant: [] for tenant in turn}
    for tenant, pk in shares:
        by_tenant[tenant].append(pk)
    columns = [[(t, pk) for pk in sorted(pks, reverse=True)] for t, pks in by_tenant.items()]
    rounds = [row for rank in itertools.zip_longest(*columns) for row in rank if row is not None]
    return list(dict.fromkeys([newest[0], *rounds, *newest]))[:limit]


MAX_REFUSALS = 3
"""How many times the embedder may refuse a memory's text (an endpoint's HTTP 400/413: a text
past its model's context) before the memory is set aside: never claimed again, nor counted in
the backlog, until `mnemos reindex` (`queue_for_model`) gives it its tries again. Its other
texts' memories are embedded meanwhile (review22, finding 1); it stays found by its words."""

WAITING = Q.refusals < MAX_REFUSALS
"""A queued memory not set aside."""

FREE = sa.and_(WAITING, sa.or_(Q.claimed_until.is_(None), Q.claimed_until < sa.bindparam("now")))
"""A queued memory nobody holds and not set aside: never claimed, or its claim expired before
`now`."""


def _tenant_walk() -> sa.Select[Any]:
    """Up to `count` tenants with queued memories, in the queue's key order from the first after
    `after` (None: from the first), wrapping round to the first (a tenant may come again): one
    step down the queue's key each, not a scan of the queue."""
    step = vector_queue.alias("step")

    def following(after: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        def first(*where: sa.ColumnElement[bool]) -> sa.ScalarSelect[Any]:
            query = sa.select(step.c.tenant_id).where(*where)
            return query.order_by(step.c.tenant_id).limit(1).scalar_subquery()

        return sa.func.coalesce(first(step.c.tenant_id > after), first())

    after = sa.bindparam("after", type_=Q.tenant_id.type)
    seed = sa.select(following(after).label("tenant_id"), sa.literal(1).label("n"))
    walk = seed.cte("walk", recursive=True)
    walk = walk.union_all(
        sa.select(following(walk.c.tenant_id), walk.c.n + 1).where(
            walk.c.tenant_id.is_not(None), walk.c.n < sa.bindparam("count")
        )
    )
    return (
        sa.select(walk.c.tenant_id).prefix_with(EVERY_TENANT).where(walk.c.tenant_id.is_not(None))
    )


TENANT_WALK = _tenant_walk()

NEWEST = (
    sa.select(Q.tenant_id, Q.memory_pk)
    .prefix_with(EVERY_TENANT)
    .where(FREE)
    .order_by(Q.memory_pk.desc())
    .limit(sa.bindparam("limit"))
)
"""The newest `limit` free queued memories, any tenant's."""


@functools.cache
def newest_of(tenants: int) -> sa.CompoundSelect[Any]:
    """The newest `share` free queued memories of each of `tenants` tenants (bound `t0`, `t1`,
    ...): one backward walk of the queue's key each."""
    parts = [
        sa.select(Q.tenant_id, Q.memory_pk)
        .where(Q.tenant_id == sa.bindparam(f"t{i}", type_=Q.tenant_id.type), FREE)
        .order_by(Q.memory_pk.desc())
        .limit(sa.bindparam("share"))
        .subquery()
        for i in range(tenants)
    ]
    return sa.union_all(*map(sa.select, parts))
