"""A hostile review of cost and fairness across tenants (review24).

Each test states the behaviour the finding asks for; each was a strict xfail, failing on the
code before its fix for the finding's reason (docs/decisions.md, "A hostile review of cost and
fairness across tenants (2026-12-05, helper "review24")"). The tests show mechanisms (memory
held, work done per request), never a time.
"""

from __future__ import annotations

import asyncio
import gc
import time
import tracemalloc

from mnemos.embedding.local import MAX_TOKENS
from mnemos.embedding.wordpiece import MAX_WORD_CHARS, WordPiece
from mnemos.ratelimit import WINDOW_SECONDS, FailureLimiter, LocalCounter

MEMORIES = 200
CONTENT_CHARS = 10_000  # MNEMOS_MAX_CONTENT_CHARS' default: one memory's whole content


def test_the_local_embedders_word_cache_does_not_keep_long_words() -> None:
    """Every text the local embedder encodes (each memory the worker embeds, each query) goes
    through `WordPiece._word`, an `lru_cache` of 65,536 words shared by every tenant of the
    process. A word longer than `MAX_WORD_CHARS` is `[UNK]` whatever it holds, yet it is cached
    under the whole word: a memory that is one 10,000-character word (a pasted base64 blob, or
    on purpose 10,000 emoji) keeps 10-40 KB in the process for good, so one tenant's 65,536 such
    memories hold 0.65-2.6 GB of every tenant's server."""
    tokenizer = WordPiece.bundled(MAX_TOKENS)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(MEMORIES):
            word = chr(0x1F600 + i % 64) * (CONTENT_CHARS - 10) + f"{i:010d}"
            assert tokenizer.encode(word) == [tokenizer.cls, tokenizer.unk, tokenizer.sep]
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # What a cached [UNK] needs: a key of at most MAX_WORD_CHARS characters (4 bytes each) and
    # the cache's own entry; today each memory keeps its whole 40 KB word.
    assert held / MEMORIES < 8 * MAX_WORD_CHARS, f"{held / MEMORIES:.0f} bytes kept per memory"


def _full_window(counter: LocalCounter, window: int) -> None:
    """Fill `counter` past its pruning threshold with keys of the current window: what requests
    without a credential from 100,001 IPv6 /64s (`access.client_address`; a /47, two free
    tunnel-broker /48s) or failures from as many addresses leave in one minute."""

    async def fill() -> None:
        for i in range(100_001):
            await counter.hit(f"ip:2001:db8:{i:x}::/64", window)

    asyncio.run(fill())


def test_the_local_rate_counter_does_not_rebuild_its_table_on_every_request() -> None:
    """`LocalCounter.hit` (the rate limiter without Redis, the default) prunes when it holds
    more than 100,000 keys by copying every key of the current window into a new dict, under a
    lock, on the event loop. When the keys are all of the current window the copy drops
    nothing, so every later request of every tenant copies 100,000+ entries (about 9 ms on this
    machine, load 4.8: the whole process serves about 100 requests a second) until the minute
    ends, and the table grows without bound meanwhile."""
    counter = LocalCounter()
    window = int(time.time() // WINDOW_SECONDS)
    _full_window(counter, window)
    rebuilt = 0

    async def requests() -> None:
        nonlocal rebuilt
        for i in range(20):
            table = counter._counts
            await counter.hit(f"agent:{i}", window)
            rebuilt += counter._counts is not table

    asyncio.run(requests())
    assert rebuilt <= 1, f"the table was copied on {rebuilt} of 20 requests"


def test_the_failure_limiter_does_not_rebuild_its_blocked_table_on_every_failure() -> None:
    """`FailureLimiter.failed` had the same shape: once `max_addresses` (100,000) addresses were
    blocked until the window's end, every further blocking copied the whole table and kept it
    all. Now the blocked addresses are the current window's, dropped whole when it ends."""
    limiter = FailureLimiter(1, LocalCounter())

    async def failures(count: int) -> int:
        rebuilt = 0
        for i in range(count):
            table = limiter._blocked
            await limiter.failed([(f"2001:db8::{i:x}", 1)])
            rebuilt += limiter._blocked is not table
        return rebuilt

    asyncio.run(failures(1_000))
    assert asyncio.run(failures(20)) == 0
    assert limiter.retry_after([("2001:db8::1", 1)]) is not None
    assert limiter.retry_after([("198.51.100.1", 1)]) is None


def test_the_rate_tables_forget_a_window_when_the_next_begins() -> None:
    """Without a copy per request, the tables must still not grow past one window: a hit of the
    next window drops the last one's keys, and its refusals end with it."""
    counter = LocalCounter()
    limiter = FailureLimiter(1, counter)
    window = int(time.time() // WINDOW_SECONDS)

    async def hits() -> None:
        for i in range(1_000):
            await counter.hit(f"ip:{i}", window - 1)
        await limiter.failed([("2001:db8::1", 1)])

    asyncio.run(hits())
    assert len(counter._counts) == 1  # the failure's count, of this window
    assert limiter.retry_after([("2001:db8::1", 1)]) is not None
    limiter._window -= 1  # the window of that refusal has ended
    assert limiter.retry_after([("2001:db8::1", 1)]) is None


def test_a_failure_counted_in_the_last_window_ends_no_block() -> None:
    """A failure whose clock read came just before the minute turned (its count awaited Redis
    meanwhile, or the clock stepped back) finishes after a later window's blocks began: it must
    not drop them (review25's note)."""
    limiter = FailureLimiter(1, LocalCounter())
    asyncio.run(limiter.failed([("2001:db8::1", 1)]))
    limiter._window += 1  # that block belongs to the next window, which has begun
    asyncio.run(limiter.failed([("2001:db8::2", 1)]))  # a failure of the window before it
    assert "2001:db8::1" in limiter._blocked
