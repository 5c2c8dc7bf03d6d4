"""Writes wait on the event loop while a long write holds SQLite's one writer.

SQLite has one writer. An erasure of a large person or an agent's deletion holds it for seconds;
a store that meets it waits, and a store waiting in a request thread holds that thread (two per
process by default): two stores of any tenants left no thread for anyone else's reads (review18).
So this process's long writes hold the `WriterGate` while they run (`run_long_write`), and a
request that may write (any method but GET, HEAD and OPTIONS) waits at the gate, on the event
loop, before it takes a thread: reads go on. On a database without one writer (PostgreSQL) the
gate is never closed. Long writes of other processes (`mnemos import --merge`) are not seen here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

from anyio import CapacityLimiter, to_thread
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

T = TypeVar("T")
READS = frozenset({"GET", "HEAD", "OPTIONS"})


class WriterGate:
    """Closed while a long write of this process runs (on a database with one writer)."""

    def __init__(self, one_writer: bool):
        self.one_writer = one_writer
        self.waiting = 0  # requests waiting at the gate now
        self._held = 0
        self._open = asyncio.Event()
        self._open.set()

    @asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        if not self.one_writer:
            yield
            return
        self._held += 1
        self._open.clear()
        try:
            yield
        finally:
            self._held -= 1
            if self._held == 0:
                self._open.set()

    async def passed(self) -> None:
        """Return once no long write holds the gate."""
        if self._open.is_set():
            return
        self.waiting += 1
        try:
            await self._open.wait()
        finally:
            self.waiting -= 1


async def run_long_write(gate: WriterGate, threads: CapacityLimiter, work: Callable[[], T]) -> T:
    """`work()` in a thread of `threads`, holding the gate while it runs: a long write waiting
    for its turn of `threads` (behind other tenants' deletions) leaves the gate open (review19)."""
    async with threads:
        async with gate.held():
            return await to_thread.run_sync(work, limiter=CapacityLimiter(1))


def writer_gate(request: Request) -> WriterGate:
    gate: WriterGate = request.app.state.writer_gate
    return gate


async def gate_passed(request: Request | None) -> None:
    """Wait at the gate of the app `request` came through (none: not served over HTTP)."""
    gate = getattr(request.app.state, "writer_gate", None) if request is not None else None
    if gate is not None:
        await gate.passed()


class WriterGateMiddleware:
    """Requests that may write wait at the gate before the app handles them, except on the
    `ungated` paths, whose POSTs mostly read and which wait where they write, if they do:
    MCP's requests are all POSTs, reads too, and its writing tools wait where they are called
    (`mcp/server.py`, review19); the page's sign-in reads a credential and signs a cookie, and
    waits only to end a session it replaces (`api/ui/account.py`, review20)."""

    def __init__(self, app: ASGIApp, gate: WriterGate, ungated: frozenset[str]):
        self.app = app
        self.gate = gate
        self.ungated = ungated

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in READS:
            if scope["path"] not in self.ungated:
                await self.gate.passed()
        await self.app(scope, receive, send)
