"""A search's query embedded beside the store's reads (docs/decisions.md, "The query's embedding
beside the search's reads").

A query's embedding depends on its words alone, and the reads a vector search starts with (its
owners' keys and sign bits) and a hybrid search's keyword leg do not need it: `Probes.ahead`
starts the embedding on a thread of its own while the request's thread reads, and the store asks
for the vector (`Probe.__call__`) when it needs it. The model releases the interpreter lock
while it runs, so a search pays about the longer of the two instead of their sum.

Nothing outlives the search: `ahead` is a context manager whose exit waits for an embedding
still running (one not started yet is cancelled), whatever the search raised.

An embedder that waits on another machine (`Embedder.remote`) is not waited for inside the
search: the route has the query embedded first (`Probes.now`, on a thread that holds no
request slot and no connection), then runs the search with the vector in hand.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager

import numpy as np
from numpy.typing import NDArray

from mnemos.domain.ports import Embedder


class Probe:
    """The embedding of one query, under way: calling it waits for the vector (or raises what
    the embedder raised)."""

    def __init__(self, future: Future[NDArray[np.float32]]):
        self._future = future

    @classmethod
    def settled(cls, embed: Callable[[], NDArray[np.float32]]) -> Probe:
        """`embed()`'s vector, or what it raised, as a probe that never waits."""
        future: Future[NDArray[np.float32]] = Future()
        try:
            future.set_result(embed())
        except Exception as exc:  # kept for the search to raise, or to fall back from
            future.set_exception(exc)
        return cls(future)

    def __call__(self) -> NDArray[np.float32]:
        return self._future.result()

    def failed_with(self, exc: BaseException) -> bool:
        """Whether `exc` is the embedder's own failure (not one of the store's)."""
        done = self._future.done() and not self._future.cancelled()
        return done and self._future.exception() is exc


class Probes:
    """Query embeddings on at most `threads` threads of their own (started when first needed):
    as many as the requests a process serves at once, so a search never waits for another's
    embedding to start (each ran on its request's thread before)."""

    def __init__(self, embedder: Embedder, threads: int = 1):
        self.embedder = embedder
        self.remote: bool = getattr(embedder, "remote", False)  # optional on the port
        self._threads = max(1, threads)
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def now(self, text: str) -> Probe:
        """`text`'s embedding on the calling thread, done (or failed) when this returns."""
        return Probe.settled(lambda: self._embed(text))

    @contextmanager
    def ahead(self, text: str) -> Iterator[Probe]:
        """`text`'s embedding, started now on a thread of this pool (in the caller's context:
        its log fields), for the caller to use inside the block."""
        context = contextvars.copy_context()
        future = self._executor().submit(context.run, self._embed, text)
        try:
            yield Probe(future)
        finally:
            if not future.cancel():
                wait([future])  # a model run cannot be interrupted: let it end here

    def close(self) -> None:
        """Stop the threads (an embedding still running ends first)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def _embed(self, text: str) -> NDArray[np.float32]:
        vector: NDArray[np.float32] = self.embedder.embed([text])[0]
        return vector

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="mnemos-probe")
            return self._pool
