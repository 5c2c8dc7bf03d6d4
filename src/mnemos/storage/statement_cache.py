"""Compiled statements by query shape, shared by a store's request threads."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

MAX_CACHED_STATEMENTS = 512
"""Shapes kept: filters x audience counts x search recheck names x the statement's kind."""


class StatementCache:
    """A least-recently-used map from a query's shape to its built statement, bounded at
    `size`: past it, the shape used longest ago goes, one at a time. A tenant that cycles
    through many shapes thus evicts only shapes nobody used meanwhile, never the statements
    every request needs (`("remember", table)` and the common lists stay). Thread-safe: a
    lookup moves its shape to the end under a lock, as an insert does."""

    def __init__(self, size: int = MAX_CACHED_STATEMENTS) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[Any, ...], Any] = OrderedDict()

    def get(self, shape: tuple[Any, ...]) -> Any | None:
        """The statement built for `shape`, or None; marks it used."""
        with self._lock:
            statement = self._entries.get(shape)
            if statement is not None:
                self._entries.move_to_end(shape)
            return statement

    def put(self, shape: tuple[Any, ...], statement: Any) -> None:
        """Keep `statement` for `shape` (two threads that built the same shape keep one)."""
        with self._lock:
            self._entries[shape] = statement
            self._entries.move_to_end(shape)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        """The shapes held, least recently used first (a copy: safe beside other threads)."""
        with self._lock:
            return iter(list(self._entries))
