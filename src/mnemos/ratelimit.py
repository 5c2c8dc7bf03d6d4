"""Per-caller request limits: fixed one-minute windows, in Redis when configured; and each
tenant's share of the requests a process handles at once (`TenantShares`).

With Redis every process counts against the same windows; without it each process keeps its
own counts (so N processes allow up to N times the limit). If Redis cannot be reached the limiter
lets requests through and logs it: an outage of the limiter must not become an outage of memory.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger("mnemos.ratelimit")
WINDOW_SECONDS = 60


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    limit: int
    remaining: int
    retry_after: int


class Counter(Protocol):
    async def hit(self, key: str, window: int) -> int:
        """Count one request for `key` in `window`; the count so far."""


class LocalCounter:
    """This process's counts of the current window only: a new window starts a new table and the
    old one is dropped whole, so a request never walks the table (a copy per request past a size
    was review24 finding 2). A key needs a request, so the table holds at most what the process
    serves in one window. A hit of an earlier window (a request that read the clock just before
    the minute turned) counts in the current one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._window = 0
        self._counts: dict[str, int] = {}

    async def hit(self, key: str, window: int) -> int:
        with self._lock:
            if window > self._window:
                self._window, self._counts = window, {}
            count = self._counts.get(key, 0) + 1
            self._counts[key] = count
            return count


class RedisCounter:
    def __init__(self, url: str, prefix: str = "mnemos:rl:"):
        import redis.asyncio as redis

        self._redis = redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        self._prefix = prefix

    async def hit(self, key: str, window: int) -> int:
        name = f"{self._prefix}{key}:{window}"
        pipe = self._redis.pipeline()
        pipe.incr(name)
        pipe.expire(name, WINDOW_SECONDS + 5)
        count, _ = await pipe.execute()
        return int(count)


class RateLimiter:
    def __init__(self, per_minute: int, counter: Counter):
        self.per_minute = per_minute
        self.counter = counter

    async def check(self, key: str) -> Verdict:
        now = time.time()
        window = int(now // WINDOW_SECONDS)
        retry_after = max(1, int((window + 1) * WINDOW_SECONDS - now))
        try:
            count = await self.counter.hit(key, window)
        except Exception:  # noqa: BLE001 - fail open, see the module docstring
            log.warning("rate limiter unavailable; letting the request through", exc_info=True)
            return Verdict(True, self.per_minute, self.per_minute, retry_after)
        remaining = max(0, self.per_minute - count)
        return Verdict(count <= self.per_minute, self.per_minute, remaining, retry_after)


class FailureLimiter:
    """Failed authentications per client address: past `per_minute` in a window, the address is
    refused until the window ends, before any credential is looked up.

    Failures are counted in the shared counter (Redis when configured); the refusal itself is
    decided from this process's memory, so successful requests cost nothing here. Another
    process starts refusing at its own next failure once the shared count is over the limit.
    """

    def __init__(self, per_minute: int, counter: Counter):
        self.per_minute = per_minute
        self.counter = counter
        # The addresses refused until the end of `_window` (every refusal ends with its window):
        # a new window drops them whole, so a failure never walks them (review24 finding 2).
        self._window = 0
        self._blocked: set[str] = set()

    def retry_after(self, keys: Sequence[tuple[str, int]]) -> int | None:
        """Seconds until a client whose failures count under `keys` (each a name and its
        limit's multiple: `mnemos.api.access.failure_keys`) may try again, or None when it may
        try now."""
        now = time.time()
        if int(now // WINDOW_SECONDS) != self._window or not any(
            key in self._blocked for key, _ in keys
        ):
            return None
        return max(1, int((self._window + 1) * WINDOW_SECONDS - now))

    async def failed(self, keys: Sequence[tuple[str, int]]) -> None:
        """Count one failed authentication under each of `keys`; a key past its limit
        (`per_minute` times its multiple) is refused until the window ends."""
        window = int(time.time() // WINDOW_SECONDS)
        for key, multiple in keys:
            try:
                count = await self.counter.hit(f"fail:{key}", window)
            except Exception:  # noqa: BLE001 - fail open, see the module docstring
                log.warning("rate limiter unavailable; not counting a failure", exc_info=True)
                return
            if count >= self.per_minute * multiple:
                if window > self._window:  # a failure that read the clock just before the
                    self._window, self._blocked = window, set()  # minute turned ends no block
                self._blocked.add(key)


class TenantShares:
    """How many requests each tenant has in flight in this process, each at most `per_tenant`.

    A share bounds what one tenant's slow requests can hold of the process (its in-flight cap,
    its request threads' queue): past it, the tenant's next request is refused, not queued.
    Counts live in this process only (a share is per process, as the threads are), and are
    touched only from the event loop, so they need no lock.
    """

    def __init__(self, per_tenant: int):
        self.per_tenant = per_tenant
        self._held: dict[str, int] = {}

    def take(self, tenant: str) -> bool:
        """Take one of `tenant`'s slots; False when it already holds all of them."""
        held = self._held.get(tenant, 0)
        if held >= self.per_tenant:
            return False
        self._held[tenant] = held + 1
        return True

    def give_back(self, tenant: str) -> None:
        held = self._held.get(tenant, 0) - 1
        if held > 0:
            self._held[tenant] = held
        else:
            self._held.pop(tenant, None)

    def held(self, tenant: str) -> int:
        return self._held.get(tenant, 0)


@dataclass(frozen=True)
class Limiters:
    """Requests per caller, failed authentications per address, and requests at once per
    tenant; None where turned off."""

    requests: RateLimiter | None
    failures: FailureLimiter | None
    shares: TenantShares | None = None


def _counter(redis_url: str, prefix: str) -> Counter:
    return RedisCounter(redis_url, prefix) if redis_url else LocalCounter()


def build_limiters(
    per_minute: int,
    failures_per_minute: int,
    redis_url: str,
    prefix: str,
    per_tenant_at_once: int = 0,
) -> Limiters:
    """The limiters settings ask for (a limit of 0 turns one off), sharing one counter."""
    counter = _counter(redis_url, prefix)
    return Limiters(
        RateLimiter(per_minute, counter) if per_minute > 0 else None,
        FailureLimiter(failures_per_minute, counter) if failures_per_minute > 0 else None,
        TenantShares(per_tenant_at_once) if per_tenant_at_once > 0 else None,
    )
