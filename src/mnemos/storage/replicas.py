"""Read replicas (PostgreSQL streaming standbys): which one may serve a read, and when none may.

Two rules, both decided here and nowhere else:

- **Rotation.** A background thread asks the primary how far its WAL is flushed and each replica
  how far it has replayed, every quarter of the lag bound. A replica is in rotation while it is
  known to hold everything the primary had at most `max_lag` seconds ago; a replica that does
  not answer, is no longer a standby, or falls further behind is out until it catches up.
- **Read-your-writes.** Every write made for a tenant (an organization, or a person without
  one) leaves the primary's WAL insert position after its commit in `write_marks` (an unlogged
  table on the primary: no WAL, no fsync). A read made for that tenant, in any process, first
  reads the mark (once per request) and goes only to a replica that has replayed past it; if
  none has, it reads the primary. Writes made for no one (the CLI, scripts) leave the mark `*`,
  which every reader waits for; the embedding worker, which acts for no one too, moves the marks
  of the memories' tenants instead (`Mark`). A read made for no one reads the primary.

The API says whom a request acts for (`act_for`); the domain knows nothing of replicas.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection, Engine

from mnemos.errors import StorageUnavailable
from mnemos.storage.schema import write_marks

log = logging.getLogger("mnemos.replicas")

EVERYONE = "*"
"""The tenant of writes made for no caller: every reader waits for them."""

# WAL positions as bytes from the start (bigint), so that Python compares them.
_FLUSHED = "SELECT (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::bigint"
_REPLAYED = "SELECT (coalesce(pg_last_wal_replay_lsn(), '0/0') - '0/0'::pg_lsn)::bigint"
_PROBE = (
    "SELECT pg_is_in_recovery(), "
    "(coalesce(pg_last_wal_replay_lsn(), '0/0') - '0/0'::pg_lsn)::bigint"
)
# The insert position is past the end of every record inserted so far, our commit's included,
# whatever `synchronous_commit` says (the flush position could still be before it).
_INSERTED = sa.text("(pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint")


@dataclass
class Reading:
    """Whom the current request acts for, and the WAL position its reads must see."""

    tenant: str
    mark: int | None = None
    """The tenant's mark, read from the primary on the request's first replica read."""
    primary_only: bool = False
    """No replica had replayed the mark when asked: the rest of the request reads the primary."""


_CURRENT: ContextVar[Reading | None] = ContextVar("mnemos_reading", default=None)


Mark = bool | list[uuid.UUID]
"""Which marks a write moves (`SqlBase._write`): the caller's tenant's (True), none (False), or
the tenants a background job's block wrote for (a list it fills)."""


def tenant_key(organization_id: uuid.UUID | None, person_id: uuid.UUID) -> str:
    """Whose writes a caller's reads must see: its organization's, or, for a person without one
    and that person's agents, the person's (`Store.act_for`)."""
    return f"org:{organization_id}" if organization_id else f"user:{person_id}"


def tenant_keys(tenant_id: uuid.UUID) -> tuple[str, str]:
    """The keys a memory's tenant is read under: `tenant_id` is an organization's id or a
    person's (never both), and which one a row does not say, so both are moved."""
    return tenant_key(tenant_id, tenant_id), tenant_key(None, tenant_id)


def act_for(tenant: str) -> None:
    """From here to the end of the current request (its context), reads must see every write
    made for `tenant`, and writes are made for it."""
    _CURRENT.set(Reading(tenant))


def current() -> Reading | None:
    return _CURRENT.get()


class ReplicaFailed(StorageUnavailable):
    """A replica failed a read (down, restarting, a conflict with recovery). The read is run
    again on the primary; should this ever escape, it is a 503 like any database failure."""

    def __init__(self, replica: Replica, reason: str):
        super().__init__(details={"reason": reason})
        self.replica = replica
        self.reason = reason


@dataclass(frozen=True)
class ReplicaStatus:
    """What the last check found (`Store.replica_status`, for operators and tests)."""

    name: str
    in_rotation: bool
    behind_seconds: float | None
    """At most this far behind the primary (None: unknown, never caught up or not answering)."""
    replayed: int
    error: str | None


class Replica:
    """One standby: its connection pools and what the checks found."""

    def __init__(self, name: str, engine: Engine, probe: Engine):
        self.name = name
        self.engine = engine
        self.reads = engine.execution_options(isolation_level="AUTOCOMMIT")
        self.snapshots = engine.execution_options(isolation_level="REPEATABLE READ")
        self.probe = probe  # one connection, for the background checks
        self.replayed = 0
        self.fresh_as_of = -math.inf
        """Monotonic time of the newest primary position this replica is known to have."""
        self.answering = False
        self.error: str | None = "not checked yet"

    def saw(self, replayed: int) -> None:
        self.replayed = max(self.replayed, replayed)

    def fail(self, reason: str) -> None:
        if self.answering:
            log.warning("replica %s out of rotation: %s", self.name, reason)
        self.answering = False
        self.error = reason
        self.engine.dispose()  # its pooled connections are likely dead


class ReplicaSet:
    """The replicas of one primary, kept in or out of rotation by a background thread."""

    def __init__(self, primary: Engine, replicas: Sequence[Replica], max_lag: float):
        self.primary = primary.execution_options(isolation_level="AUTOCOMMIT")
        self.replicas = list(replicas)
        self.max_lag = max_lag
        self.interval = min(1.0, max(0.05, max_lag / 4))
        self._history: deque[tuple[float, int]] = deque()  # (when, primary flush position)
        self._turn = itertools.count()
        self._checking = threading.Lock()
        self._primary_answering = True
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="mnemos-replicas", daemon=True)
        self._thread.start()

    # --- rotation ----------------------------------------------------------------------------

    def _watch(self) -> None:
        while True:
            self.check()
            if self._stop.wait(self.interval):
                return

    def check(self) -> None:
        """Sample the primary's flushed WAL, then every replica's replayed WAL."""
        with self._checking:
            try:
                with self.primary.connect() as conn:
                    flushed = int(conn.exec_driver_sql(_FLUSHED).scalar_one())
            except sa.exc.SQLAlchemyError as exc:  # judge nothing without the primary
                if self._primary_answering:
                    log.warning("replica checks: the primary is not answering: %s", _reason(exc))
                self._primary_answering = False
                return
            self._primary_answering = True
            now = time.monotonic()
            self._history.append((now, flushed))
            while len(self._history) > 1 and self._history[0][0] < now - 2 * self.max_lag - 1:
                self._history.popleft()
            for replica in self.replicas:
                self._check(replica)

    def _check(self, replica: Replica) -> None:
        try:
            with replica.probe.connect() as conn:
                standby, replayed = conn.exec_driver_sql(_PROBE).one()
        except sa.exc.SQLAlchemyError as exc:
            replica.probe.dispose()
            replica.fail(_reason(exc))
            return
        if not standby:
            replica.fail("not a standby (promoted?)")
            return
        replica.saw(int(replayed))
        # The newest primary sample the replica has replayed past: it is at most that old.
        known = [when for when, flushed in self._history if flushed <= replica.replayed]
        replica.fresh_as_of = max(known, default=replica.fresh_as_of)
        if not replica.answering:
            log.info("replica %s answering", replica.name)
        replica.answering, replica.error = True, None

    def in_rotation(self, replica: Replica, now: float) -> bool:
        return replica.answering and now - replica.fresh_as_of <= self.max_lag

    def status(self) -> list[ReplicaStatus]:
        now = time.monotonic()
        return [
            ReplicaStatus(
                name=r.name,
                in_rotation=self.in_rotation(r, now),
                behind_seconds=now - r.fresh_as_of if r.answering and r.fresh_as_of > 0 else None,
                replayed=r.replayed,
                error=r.error,
            )
            for r in self.replicas
        ]

    # --- routing -----------------------------------------------------------------------------

    def choose(self, reading: Reading | None) -> Replica | None:
        """A replica in rotation that holds every write `reading` must see; None: the primary."""
        if reading is None or reading.primary_only:
            return None
        now = time.monotonic()
        ready = [r for r in self.replicas if self.in_rotation(r, now)]
        if not ready:
            return None
        if reading.mark is None:
            reading.mark = self._mark(reading.tenant)
        start = next(self._turn) % len(ready)
        ordered = ready[start:] + ready[:start]
        for replica in ordered:
            if replica.replayed >= reading.mark:
                return replica
        # Behind as of the last check: ask one now (a write a moment ago is usually there).
        if self._replayed_now(ordered[0]) >= reading.mark:
            return ordered[0]
        reading.primary_only = True
        return None

    def _mark(self, tenant: str) -> int:
        marks = write_marks.c
        query = sa.select(sa.func.coalesce(sa.func.max(marks.lsn), 0)).where(
            marks.tenant.in_([tenant, EVERYONE])
        )
        with self.primary.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def _replayed_now(self, replica: Replica) -> int:
        try:
            with replica.reads.connect() as conn:
                replica.saw(int(conn.exec_driver_sql(_REPLAYED).scalar_one()))
        except sa.exc.SQLAlchemyError as exc:
            replica.fail(_reason(exc))
            return -1
        return replica.replayed

    def written(self, conn: Connection, tenants: Sequence[uuid.UUID] | None = None) -> None:
        """After a write committed on `conn`: move its tenant's mark past the commit (the
        caller's; or, for background work that acts for no caller, the memories' `tenants`:
        none of them is then `EVERYONE`, whom every reader of every tenant waits for)."""
        reading = current()
        if tenants is not None:
            keys = sorted({key for tenant_id in tenants for key in tenant_keys(tenant_id)})
            if not keys:
                return
        else:
            keys = [reading.tenant if reading is not None else EVERYONE]
        marks = write_marks.c
        insert = pg_insert(write_marks).values([{"tenant": key, "lsn": _INSERTED} for key in keys])
        upsert = insert.on_conflict_do_update(
            index_elements=[marks.tenant],
            set_={"lsn": sa.func.greatest(marks.lsn, insert.excluded.lsn)},
        ).returning(marks.lsn)
        try:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            mark = max(int(lsn) for lsn in conn.execute(upsert).scalars())
        except sa.exc.SQLAlchemyError as exc:
            # The write itself is committed: say so, but read the primary for the rest of it.
            log.warning("could not record a write mark: %s", _reason(exc))
            if reading is not None:
                reading.primary_only = True
            return
        if reading is not None and reading.mark is not None:
            reading.mark = max(reading.mark, mark)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for replica in self.replicas:
            replica.probe.dispose()
            replica.engine.dispose()


def _reason(exc: sa.exc.SQLAlchemyError) -> str:
    orig = getattr(exc, "orig", None)
    return str(orig if orig is not None else exc).strip()[:200]


def replica_set(
    primary: Engine,
    urls: Sequence[str],
    max_lag: float,
    engine: Callable[[str, bool], Engine],
) -> ReplicaSet:
    """`engine(url, probe)` builds a pool for reads, or the one-connection pool of the checks."""
    replicas = [Replica(_name(url), engine(url, False), engine(url, True)) for url in urls]
    return ReplicaSet(primary, replicas, max_lag)


def _name(url: str) -> str:
    """host:port/database, never the password."""
    parsed = sa.engine.make_url(url)
    return f"{parsed.host or 'localhost'}:{parsed.port or 5432}/{parsed.database or ''}"
