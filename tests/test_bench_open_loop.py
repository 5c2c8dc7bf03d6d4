"""The open-loop client of `bench.store_latency --rate`: paced sends, and a stall counted against
every request scheduled during it (no coordinated omission), against a real HTTP server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from bench import open_loop

STALL_SECONDS = 0.3
STALLED = 5  # the request whose answer takes STALL_SECONDS


class OneAtATime(BaseHTTPRequestHandler):
    """Answers one request at a time (as one busy server thread would), `/stall` slowly."""

    protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn
    lock = threading.Lock()

    def do_GET(self) -> None:
        with self.lock:
            if self.path == "/stall":
                time.sleep(STALL_SECONDS)
            self.send_response(200 if self.path in ("/", "/stall", "/healthz") else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def base() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), OneAtATime)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def request(http: httpx.Client, i: int) -> httpx.Response:
    return http.get("/stall" if i == STALLED else "/")


def test_sends_are_paced_at_the_rate(base: str) -> None:
    began = time.perf_counter()
    timings = open_loop.run(base, {}, 50.0, 26, lambda http, _: http.get("/"))
    spent = time.perf_counter() - began
    assert len(timings.from_schedule) == 26
    assert 0.5 <= timings.seconds and spent < 5  # 25 gaps of 20 ms, not back to back
    assert all(s >= d for s, d in zip(timings.from_schedule, timings.from_send, strict=True))


def test_a_stall_counts_against_the_requests_scheduled_during_it(base: str) -> None:
    timings = open_loop.run(base, {}, 50.0, 30, request)
    # Sent on time while the server was stuck: each waited for the stall's remainder.
    assert timings.from_schedule[STALLED] >= STALL_SECONDS * 1000 * 0.9
    assert timings.from_schedule[STALLED + 1] >= (STALL_SECONDS - 0.02) * 1000 * 0.9
    assert timings.from_schedule[STALLED + 5] >= (STALL_SECONDS - 0.1) * 1000 * 0.9
    assert max(timings.send_delay) < STALL_SECONDS * 1000 / 2  # not held back by the stall
    described = open_loop.describe(timings, 10, lambda ms: max(ms))
    assert described["measured"] == 20
    assert described["store ms from schedule"] >= (STALL_SECONDS - 0.2) * 1000 * 0.9


def test_a_failed_request_fails_the_run(base: str) -> None:
    with pytest.raises(RuntimeError, match="1 of 3 requests failed"):
        open_loop.run(base, {}, 100.0, 3, lambda http, i: http.get("/" if i != 1 else "/x"))


def test_a_client_held_back_still_counts_from_the_schedule(
    base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(open_loop, "SENDERS", 1)  # the client, not the server, holds them back
    timings = open_loop.run(base, {}, 50.0, 12, request)
    after = STALLED + 1  # sent only once the stall answered, ~280 ms past its schedule
    assert timings.send_delay[after] >= (STALL_SECONDS - 0.02) * 1000 * 0.9
    assert timings.from_schedule[after] >= timings.send_delay[after]
    assert timings.from_send[after] < STALL_SECONDS * 1000 / 2
