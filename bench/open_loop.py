"""An open-loop client: requests sent at fixed times, whether or not the earlier ones answered.

A closed loop (one client, each request after the last answer) slows down with the server, so
a stall delays the requests that would have come meanwhile and they never count as late
("coordinated omission"). Here a dispatcher thread hands request `i` to a pool of sender
threads (each with its own keep-alive connection) at `start + i / rate`, and each latency is
reported twice: from the scheduled time (what a caller arriving then waited, queueing in the
client included) and from the moment a sender actually sent it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

SENDERS = 16  # more than ever in flight at 100/s; few enough that each is reused within
# uvicorn's 5 s keep-alive at 10/s, so no measured request pays a new connection


@dataclass
class Timings:
    """Per request, in order of schedule: ms from its scheduled time and from its send."""

    from_schedule: list[float] = field(default_factory=list)
    from_send: list[float] = field(default_factory=list)
    send_delay: list[float] = field(default_factory=list)  # ms from scheduled time to send
    seconds: float = 0.0  # from the first scheduled time to the last answer


def run(
    base: str,
    headers: dict[str, str],
    rate: float,
    count: int,
    request: Callable[[httpx.Client, int], httpx.Response],
    on_start: Callable[[int], None] | None = None,
) -> Timings:
    """Send `count` requests at `rate` a second: `request(client, i)` sends the i-th (and must
    answer 2xx). `on_start(i)` runs in the dispatcher just before request i is handed over."""
    jobs: queue.Queue[tuple[int, float] | None] = queue.Queue()
    done: list[tuple[int, float, float, float] | None] = [None] * count
    errors: list[BaseException] = []
    ready = threading.Barrier(SENDERS + 1)

    def sender() -> None:
        with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
            http.get("/healthz").raise_for_status()  # the connection, open before the clock
            ready.wait()
            while (job := jobs.get()) is not None:
                i, due = job
                sent = time.perf_counter()
                try:
                    request(http, i).raise_for_status()
                except BaseException as error:  # reported by the dispatcher's thread
                    errors.append(error)
                done[i] = (i, due, sent, time.perf_counter())

    threads = [threading.Thread(target=sender, daemon=True) for _ in range(SENDERS)]
    for thread in threads:
        thread.start()
    ready.wait()
    start = time.perf_counter() + 0.01
    for i in range(count):
        due = start + i / rate
        pause = due - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        if on_start is not None:
            on_start(i)
        jobs.put((i, due))
    for _ in threads:
        jobs.put(None)
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"{len(errors)} of {count} requests failed") from errors[0]
    return _timings([row for row in done if row is not None], start)


def _timings(rows: list[tuple[int, float, float, float]], start: float) -> Timings:
    found = Timings()
    for _, due, sent, answered in sorted(rows):
        found.from_schedule.append((answered - due) * 1000)
        found.from_send.append((answered - sent) * 1000)
        found.send_delay.append((sent - due) * 1000)
    found.seconds = max(row[3] for row in rows) - start
    return found


def describe(timings: Timings, skip: int, figures: Callable[[list[float]], Any]) -> dict[str, Any]:
    """The figures of the requests after the first `skip` (unmeasured warm-up)."""
    measured = len(timings.from_send) - skip
    return {
        "store ms from schedule": figures(timings.from_schedule[skip:]),
        "store ms from send": figures(timings.from_send[skip:]),
        "sent 1 ms or more late": sum(delay >= 1 for delay in timings.send_delay[skip:]),
        "measured": measured,
        "achieved per s": round(len(timings.from_send) / timings.seconds, 1),
    }
