"""The embedding worker: every server process embeds queued memories in a background thread.

A stored memory is queued in the transaction that stores it (migration 0010); the first idle
worker of any process claims it for 30 s, embeds it and saves its vector. A process killed
mid-batch loses nothing: its claims expire and another worker (or the same, restarted) takes
them. See docs/search.md, "Write path".
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Callable

from mnemos.domain.ports import Embedder, VectorStore
from mnemos.domain.recall import adopt_former_vectors, embed_pending, models_apart

log = logging.getLogger("mnemos")

IDLE_SECONDS = 1.0
"""How often an idle worker looks at the queue: for memories queued by other processes (their
own workers are woken by their stores) or by `mnemos import`; this process's stores wake it at
once (`VectorStore.on_queued`)."""
ERROR_SECONDS = 2.0  # the pause after a failed batch (a down embedding service, a busy database)
BATCH = 8
"""Memories embedded per batch: each batch is one short write transaction (SQLite's one writer
is held for it) and ~10 ms of model time, so a store waiting behind the worker waits little; at
this machine's ~100-400 texts/s a queue still drains far faster than clients store."""
NICENESS = 10
SWEEP_CHUNKS = 8
ADOPT_SECONDS = 60.0
"""How often a worker adopts the vectors a process of a release before migration 0026 saved
under the endpoint's bare model name (`adopt_former_vectors`; a rolling upgrade's old processes
save them until they are restarted), during its first `ADOPT_WINDOW` (an upgrade is under way
when a process starts); then no more (`mnemos reindex` adopts them too). A look reads the model
of every vector (no index holds it: one would cost each save for a check that finds something
only during an upgrade): 74 ms (SQLite) to 123 ms (PostgreSQL) at 1,000,000 vectors cached,
500 MB read from disk when not (docs/decisions.md, "review23's findings fixed")."""
ADOPT_WINDOW = 3600.0
QUIET_SECONDS = 0.002
"""How long no request must have been in flight before the worker starts a step: a client that
sends its next request right after an answer (the gap is ~1 ms) finds the worker still waiting,
not starting a step at that moment."""
GIVE_WAY_SECONDS = 0.05
"""The most the worker waits before one step while requests keep coming, when a server turns
giving way on (`MNEMOS_EMBED_GIVE_WAY_MS=50`; off by default): a batch is 10 steps (the claim,
8 texts, the save), so under requests that never stop a stored memory still waits at most ~0.5 s
for its batch."""
GIVE_WAY_SHARE = 1.0
"""... and at most this many times as long as its last step took: under requests that never stop
the worker still works about half the time, so it keeps up with a steady stream of stores
(with a 50 ms bound alone it embedded ~16 a second behind 50 stores a second: store8)."""


class InFlight:
    """The requests this process is handling (counted by the API's middleware), which the
    embedding worker gives way to: it starts no step (a claim, one text's embedding, a save) while
    one is in flight, unless it has waited its bound.

    While it embeds, the worker holds the interpreter lock (tokenising, pooling, SQLAlchemy), the
    process's SQLite writer, and a core: a request arriving then waits behind it
    (docs/decisions.md, "The embedding worker gives way to requests")."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._count = 0
        self._last_end = -math.inf  # time.monotonic() when the last request ended
        self.delayed = 0
        """Steps the worker started later because of requests (tests and benchmarks read it)."""
        self.overdue = 0
        """... of which started with requests still in flight, at the bound."""

    @property
    def count(self) -> int:
        return self._count

    def begin(self) -> None:
        with self._changed:
            self._count += 1

    def end(self) -> None:
        with self._changed:
            self._count -= 1
            self._last_end = time.monotonic()
            if self._count == 0:
                self._changed.notify_all()

    def give_way(self, quiet: float, bound: float) -> None:
        """Return once no request has been in flight for `quiet` seconds, or after `bound`
        seconds at most."""
        with self._changed:
            deadline = None
            while True:
                now = time.monotonic()
                # How long to wait at least before the next look.
                left = quiet if self._count else self._last_end + quiet - now
                if left <= 0:
                    return
                if deadline is None:
                    deadline = now + bound
                    self.delayed += 1
                if now >= deadline:
                    self.overdue += self._count > 0
                    return
                # Woken when the last request ends; else after the quiet time left (a request
                # that began and ended meanwhile moved `_last_end`) or at the deadline.
                wait = deadline - now if self._count else min(left, deadline - now)
                self._changed.wait(wait)


class Indexer:
    """Embeds queued memories in a daemon thread until `stop`."""

    def __init__(
        self,
        store: VectorStore,
        embedder: Embedder | Callable[[], Embedder | None],
        batch: int = BATCH,
        requests: InFlight | None = None,
        give_way_seconds: float = GIVE_WAY_SECONDS,
        give_way_share: float = GIVE_WAY_SHARE,
        adopt_seconds: float = ADOPT_SECONDS,
        adopt_window: float = ADOPT_WINDOW,
    ):
        """`embedder`, or a function that builds it: then it is built in the worker's thread,
        so a server answers before its worker's model is loaded. With `requests` (a server's),
        each step waits for a moment without requests in flight, `give_way_seconds` at most
        (0: it does not wait) and `give_way_share` times its last step's time at most."""
        self.store = store
        self._embedder = embedder
        self.batch = batch
        self._requests = requests
        self._bound = give_way_seconds
        self._share = give_way_share
        self._step_began = time.monotonic()
        self._give_way: Callable[[], object] | None = None
        if requests is not None and give_way_seconds > 0:
            self._give_way = self._wait_for_quiet
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by a commit of this process that queued memories
        self._thread: threading.Thread | None = None
        self._swept: tuple[uuid.UUID, str, int] | None = (
            None  # where the sweep of deleted vectors is
        )
        self._next_sweep = 0.0  # time.monotonic() of the next sweep
        self._adopt_seconds = adopt_seconds
        self._adopt_window = adopt_window
        self._next_adoption = 0.0  # ... of the next `adopt_former_vectors`: at once
        self._adopt_until = 0.0  # ... when looks go from every `adopt_seconds` to every window

    def start(self) -> None:
        self.store.on_queued(self._wake.set)
        self._thread = threading.Thread(target=self._run, name="mnemos-indexer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.store.off_queued(self._wake.set)  # a store outlives its apps (tests build several)
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        # Embedding is background work: on a busy machine the request threads go first (Linux
        # keeps a nice value per thread; the embedder should run in this thread: one CPU thread).
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)
        except (AttributeError, OSError):  # not Linux, or not allowed: run at normal priority
            pass
        embedder = self._embedder() if callable(self._embedder) else self._embedder
        if embedder is None:
            return
        self._adopt(embedder)  # first: a rolling upgrade's bare names are not another model
        self._warn_of_other_models(embedder.model)
        while not self._stop.is_set():
            self._adopt(embedder)
            try:
                done = embed_pending(self.store, embedder, self.batch, self._give_way)
            except Exception:  # keep the worker alive; the batch's claim expires and is retried
                log.exception("embedding queued memories failed")
                self._stop.wait(ERROR_SECONDS)
                continue
            if done == 0:
                # At most once a look's interval, however often stores wake the worker (at 20
                # stores a second it swept after each: review7).
                now = time.monotonic()
                if now >= self._next_sweep:
                    self._next_sweep = now + IDLE_SECONDS
                    if self._give_way is not None:
                        self._give_way()
                    self._sweep()
                self._wake.wait(IDLE_SECONDS)
                self._wake.clear()  # before the next look at the queue: no wake-up is lost

    def _adopt(self, embedder: Embedder) -> None:
        """At the worker's start, then every `adopt_seconds` for `adopt_window`: a rolling
        upgrade's old processes may save under the former name until the last of them stops,
        after this one started. Then no more (each look reads every vector's model): a process
        of the old release left running past that is found by `mnemos reindex`, which adopts
        first."""
        now = time.monotonic()
        if now < self._next_adoption:
            return
        if not self._adopt_until:
            self._adopt_until = now + self._adopt_window
        self._next_adoption = now + self._adopt_seconds if now < self._adopt_until else math.inf
        try:
            adopt_former_vectors(self.store, embedder)
        except Exception:
            log.exception("adopting the vectors saved under the model's former name failed")

    def _warn_of_other_models(self, model: str) -> None:
        """Once, as the server starts: a database reindexed under another embedder than this
        server's answers searches by meaning with nothing (each such search says so in its
        `meta`). Nothing is queued for this model here: which model is right is the
        operator's choice, and re-embedding every memory is theirs to start (`mnemos reindex
        --switch-model`; docs/decisions.md, "Storage and lock-order leftovers"). Read in this
        thread: the server answers meanwhile."""
        try:
            note = models_apart(self.store.vector_models(), model)
        except Exception:
            log.exception("reading the models of the stored vectors failed")
            return
        if note is not None:
            log.warning("recall by meaning: %s", note)

    def _wait_for_quiet(self) -> None:
        """Before a step: give way to requests in flight, for at most the bound, and at most
        `share` times as long as the last step took (the time since the last wait ended)."""
        assert self._requests is not None
        worked = time.monotonic() - self._step_began
        self._requests.give_way(QUIET_SECONDS, min(self._bound, worked * self._share))
        self._step_began = time.monotonic()

    def _sweep(self) -> None:
        """While idle, rewrite a few chunks without the vectors of deleted memories: the whole
        layout is swept every `chunks / SWEEP_CHUNKS × IDLE_SECONDS` at most (1M memories: about
        20 minutes; a removed memory's sealed copy is never answered meanwhile, only kept)."""
        try:
            self._swept = self.store.compact_vectors(self._swept, SWEEP_CHUNKS)
        except Exception:
            log.exception("sweeping deleted vectors failed")


def drain(
    store: VectorStore,
    embedder: Embedder,
    batch: int = BATCH,
    progress: Callable[[int], object] | None = None,
) -> int:
    """Embed until the queue is empty, waiting out other workers' claims; how many this call
    embedded (`progress` is told each batch's count). The vectors saved under the embedder's
    former name are adopted first (`adopt_former_vectors`)."""
    adopt_former_vectors(store, embedder)
    embedded = 0
    while True:
        done = embed_pending(store, embedder, batch)
        embedded += done
        if progress is not None and done:
            progress(done)
        if done == 0:
            if store.vector_backlog() == 0:
                return embedded
            time.sleep(0.05)  # another worker holds the rest
