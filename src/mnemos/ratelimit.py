"""Per-caller request limits: fixed one-minute windows, in Redis when configured.

With Redis every process counts against the same windows; without it each process keeps its
own counts (so N processes allow up to N times the limit). If Redis cannot be reached the limiter
lets requests through and logs it: an outage of the limiter must not become an outage of memory.
"""

from __future__ import annotations

import logging
import threading
import time
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
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, int], int] = {}

    async def hit(self, key: str, window: int) -> int:
        with self._lock:
            if len(self._counts) > 100_000:
                self._counts = {k: v for k, v in self._counts.items() if k[1] >= window}
            count = self._counts.get((key, window), 0) + 1
            self._counts[(key, window)] = count
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


def build_limiter(per_minute: int, redis_url: str, prefix: str) -> RateLimiter | None:
    if per_minute <= 0:
        return None
    counter: Counter = RedisCounter(redis_url, prefix) if redis_url else LocalCounter()
    return RateLimiter(per_minute, counter)
