"""Stops SQLite statements that run past a deadline, from one thread per process.

`sqlite3.Connection.interrupt()` may be called from any thread and makes the running statement
fail with "interrupted". A progress handler could do the same from inside the statement, but it
is a Python callback: each call must take the interpreter lock, and while another request thread
holds it a call waits up to the switch interval (5 ms), many times per search. The watchdog
instead sleeps until the earliest deadline and interrupts only the statements still running then.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

REPEAT_SECONDS = 0.002


class Watchdog:
    """Interrupts a connection once its deadline passes, unless released first."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._due: dict[int, tuple[float, Any]] = {}  # token -> (deadline, DB-API connection)
        self._fired: set[int] = set()
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, connection: Any, seconds: float) -> int:
        """Interrupt `connection` in `seconds` unless `release` comes first; returns a token."""
        with self._lock:
            token = next(self._tokens)
            self._due[token] = (time.monotonic() + seconds, connection)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="mnemos-watchdog")
                self._thread.daemon = True
                self._thread.start()
            self._lock.notify()
        return token

    def release(self, token: int) -> bool:
        """Stop watching; True if the connection was interrupted. Under the lock, so no
        interrupt can reach a connection after its statement was released."""
        with self._lock:
            self._due.pop(token, None)
            fired = token in self._fired
            self._fired.discard(token)
            return fired

    def _run(self) -> None:
        with self._lock:
            while True:
                now = time.monotonic()
                for token, (deadline, connection) in list(self._due.items()):
                    if deadline <= now:
                        # Again and again until released: an interrupt that comes while no
                        # statement runs yet (the search is still being prepared) is dropped.
                        connection.interrupt()
                        self._due[token] = (now + REPEAT_SECONDS, connection)
                        self._fired.add(token)
                earliest = min((deadline for deadline, _ in self._due.values()), default=None)
                self._lock.wait(None if earliest is None else max(earliest - now, 0.0))
