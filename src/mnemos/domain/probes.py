"""Work a search runs beside its request's thread (docs/decisions.md, "The query's embedding
beside the search's reads").

A query's embedding depends on its words alone, and the reads a vector search starts with (its
owners' keys and sign bits) and a hybrid search's keyword leg do not need it: `Beside.ahead`
starts the embedding on a thread of its own while the request's thread reads, and the store asks
for the vector (`Probe.__call__`) when it needs it. The model releases the interpreter lock
while it runs, so a search pays about the longer of the two instead of their sum. In the same
way a first page keeps its answer for the later pages (`Beside.during`) while its rows are read.

Nothing outlives the search: each is a context manager whose exit waits for the work still
running (work not started yet is cancelled), whatever the search raised.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from mnemos.domain.ports import Embedder

T = TypeVar("T")


class Probe:
    """The embedding of one query, under way: calling it waits for the vector (or raises what
    the embedder raised)."""

    def __init__(self, future: Future[NDArray[np.float32]]):
        self._future = future

    def __call__(self) -> NDArray[np.float32]:
        return self._future.result()

    def failed_with(self, exc: BaseException) -> bool:
        """Whether `exc` is the embedder's own failure (not one of the store's)."""
        done = self._future.done() and not self._future.cancelled()
        return done and self._future.exception() is exc


class Beside:
    """At most `threads` threads (started when first needed) that run a search's work beside
    its request's thread: as many as the requests a process serves at once, so no search waits
    for another's work to start (each ran on its request's thread before)."""

    def __init__(self, threads: int = 1):
        self._threads = max(1, threads)
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    @contextmanager
    def during(self, work: Callable[..., T], *args: Any) -> Iterator[Future[T]]:
        """`work(*args)`, started now on a thread of this pool (in the caller's context: its
        log fields), for the caller to join inside the block."""
        context = contextvars.copy_context()
        future = self._executor().submit(context.run, work, *args)
        try:
            yield future
        finally:
            if not future.cancel():
                wait([future])  # a model run or a statement cannot be interrupted: it ends here

    @contextmanager
    def ahead(self, embedder: Embedder, text: str) -> Iterator[Probe]:
        """`text`'s embedding by `embedder`, under way inside the block."""
        with self.during(_embed_one, embedder, text) as future:
            yield Probe(future)

    def close(self) -> None:
        """Stop the threads (work still running ends first)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="mnemos-beside")
            return self._pool


def _embed_one(embedder: Embedder, text: str) -> NDArray[np.float32]:
    vector: NDArray[np.float32] = embedder.embed([text])[0]
    return vector
