"""No client can starve the others by holding connections or sending huge heads (raw sockets).

The server runs with one-second deadlines and a small in-flight limit so that each test takes
a few seconds; every socket is on loopback and closed at the end.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BACKENDS
from tests.live.conftest import LiveServer, _database_for, start_server, stop_server

TIMEOUT = 1.0  # head, body and keep-alive deadlines of the server under test
MAX_IN_FLIGHT = 4
IDLE_SOCKETS = 300
HALF_HEADS = 50
GRACE = 4.0  # how much later than its deadline the server may close a connection
LIMITS = {
    "MNEMOS_HEADER_TIMEOUT_SECONDS": str(TIMEOUT),
    "MNEMOS_BODY_TIMEOUT_SECONDS": str(TIMEOUT),
    "MNEMOS_KEEP_ALIVE_SECONDS": str(int(TIMEOUT)),
    "MNEMOS_MAX_IN_FLIGHT": str(MAX_IN_FLIGHT),
    "MNEMOS_MAX_HEADER_BYTES": str(32 * 1024),
    "MNEMOS_MAX_HEADER_LINE_BYTES": str(8 * 1024),
}
HALF_BODY = (
    b"POST /api/v1/agent/memories HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
    b"Content-Length: 200\r\n\r\n"
)


@pytest.fixture(scope="module", params=BACKENDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("connections")
    databases = _database_for(request.param, tmp)
    live = start_server(next(databases), tmp, settings=LIMITS)
    try:
        yield live
    finally:
        stop_server(live)
        databases.close()


@contextlib.contextmanager
def sockets(server: LiveServer, count: int, send: bytes = b"") -> Iterator[list[socket.socket]]:
    port = int(server.base_url.rsplit(":", 1)[1])
    opened: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            opened.append(sock)
            if send:
                sock.sendall(send)
        yield opened
    finally:
        for sock in opened:
            sock.close()


def exchange(server: LiveServer, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send one raw request on a new connection; the status, headers and body of the answer."""
    with sockets(server, 1) as (sock,):
        with contextlib.suppress(OSError):  # the server may refuse before reading it all
            sock.sendall(raw)
        return read_response(sock)


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed without an answer: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        body += chunk
    return int(lines[0].split()[1]), headers, body


def get(path: str, *headers: bytes) -> bytes:
    extra = b"".join(header + b"\r\n" for header in headers)
    return b"GET " + path.encode() + b" HTTP/1.1\r\nHost: t\r\n" + extra + b"\r\n"


def assert_error_shape(status: int, headers: dict[str, str], body: bytes, code: str) -> None:
    error: dict[str, Any] = json.loads(body)["error"]
    assert headers["content-type"] == "application/json"
    assert (error["code"], error["request_id"]) == (code, headers["x-request-id"]), status


def closed_by_server(opened: list[socket.socket], within: float) -> int:
    """How many of `opened` the server closes (EOF or reset) within `within` seconds."""
    selector = selectors.DefaultSelector()
    for sock in opened:
        selector.register(sock, selectors.EVENT_READ)
    closed = 0
    deadline = time.monotonic() + within
    while closed < len(opened) and (left := deadline - time.monotonic()) > 0:
        for key, _ in selector.select(timeout=left):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(65536)
            except ConnectionError:
                data = b""
            if not data:
                selector.unregister(sock)
                closed += 1
    selector.close()
    return closed


def test_idle_and_half_sent_connections_are_closed_and_others_served(server: LiveServer) -> None:
    with (
        sockets(server, IDLE_SOCKETS) as idle,
        sockets(server, HALF_HEADS, b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow") as half_heads,
        sockets(server, 2, HALF_BODY + b'{"memory": ') as half_bodies,
    ):
        status, _, body = exchange(server, get("/healthz", b"Connection: close"))
        assert (status, json.loads(body)) == (200, {"status": "ok"})
        everyone = idle + half_heads + half_bodies
        assert closed_by_server(everyone, TIMEOUT + GRACE) == len(everyone)
    status, _, _ = exchange(server, get("/healthz", b"Connection: close"))
    assert status == 200


def test_requests_over_the_in_flight_limit_get_503_in_the_error_shape(server: LiveServer) -> None:
    with sockets(server, MAX_IN_FLIGHT, HALF_BODY) as stalled:
        deadline = time.monotonic() + TIMEOUT
        while True:  # the stalled requests reach the application in a moment
            status, headers, body = exchange(server, get("/healthz", b"Connection: close"))
            if status == 503 or time.monotonic() > deadline:
                break
        assert status == 503, body
        assert_error_shape(status, headers, body, "overloaded")
        assert headers["retry-after"] == "1"
        # The stalled bodies run out of time; their connections close and the slots free up.
        assert closed_by_server(stalled, TIMEOUT + GRACE) == MAX_IN_FLIGHT
    status, _, _ = exchange(server, get("/healthz", b"Connection: close"))
    assert status == 200


def test_a_request_cut_mid_body_is_not_handled(server: LiveServer) -> None:
    org = server.admin("create-org", "--name", "Cut")["id"]
    user = server.admin("create-user", "--name", "C", "--email", "c@cut.test", "--org", org)
    key = server.admin("create-agent", "--owner", user["id"], "--name", "C")["api_key"]
    auth = b"X-API-Key: " + key.encode()
    # A body that is valid JSON as far as it goes, from a client that stops before its end.
    prefix = b'{"memory": {"content": "cut short", "system": "long_term", "type": "semantic", '
    prefix += b'"segment": "user", "thought": "t"}}'
    head = HALF_BODY.replace(b"Host: t\r\n", b"Host: t\r\n" + auth + b"\r\n")
    with sockets(server, 1, head + prefix.ljust(150)) as (sock,):
        assert closed_by_server([sock], TIMEOUT + GRACE) == 1
    status, _, body = exchange(server, get("/api/v1/agent/memories", auth, b"Connection: close"))
    assert status == 200
    assert json.loads(body)["data"] == []


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        pytest.param([b"X-Big: " + b"a" * 64 * 1024], "headers_too_large", id="one 64 KiB header"),
        pytest.param([b"X-Line: " + b"a" * 9000], "headers_too_large", id="one 9,000 B header"),
        pytest.param(
            [b"X-M%d: %s" % (i, b"a" * 4000) for i in range(12)],
            "headers_too_large",
            id="twelve 4 KB headers",
        ),
    ],
)
def test_oversized_request_heads_get_431(
    server: LiveServer, headers: list[bytes], code: str
) -> None:
    status, response_headers, body = exchange(server, get("/healthz", *headers))
    assert status == 431
    assert_error_shape(status, response_headers, body, code)


def test_a_long_request_target_gets_414(server: LiveServer) -> None:
    status, headers, body = exchange(server, get("/healthz?q=" + "a" * 9000))
    assert status == 414
    assert_error_shape(status, headers, body, "uri_too_long")


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"GARBAGE\r\n\r\n", id="no request line"),
        pytest.param(b"GET /healthz HTTP/1.1\r\nHost t\r\n\r\n", id="header without colon"),
        pytest.param(b"GET /healthz HTTP/9.9\r\nHost: t\r\n\r\n", id="unknown version"),
        pytest.param(
            b"POST /api/v1/agent/memories HTTP/1.1\r\nHost: t\r\nContent-Length: x\r\n\r\n",
            id="bad content-length",
        ),
        pytest.param(
            b"POST /api/v1/agent/memories HTTP/1.1\r\nHost: t\r\n"
            b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",
            id="bad chunk size",
        ),
    ],
)
def test_malformed_requests_get_400_in_the_error_shape(server: LiveServer, raw: bytes) -> None:
    status, headers, body = exchange(server, raw)
    assert status == 400
    assert_error_shape(status, headers, body, "bad_request")


def test_large_heads_under_the_limits_are_served(server: LiveServer) -> None:
    token = b"Authorization: Bearer " + b"x" * 6000  # a large but plausible JWT
    many = [b"X-M%d: %s" % (i, b"a" * 1000) for i in range(20)]
    status, headers, body = exchange(server, get("/api/v1/agent/memories", token, *many))
    assert status == 401
    assert_error_shape(status, headers, body, "unauthorized")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_huge_headers_do_not_grow_the_server(server: LiveServer) -> None:
    before = rss_mib(server.process.pid)
    for _ in range(16):
        status, _, _ = exchange(server, get("/healthz", b"X-Huge: " + b"a" * 8 * 1024 * 1024))
        assert status == 431
    assert rss_mib(server.process.pid) - before < 64


def test_idle_kept_alive_connections_are_closed(server: LiveServer) -> None:
    with sockets(server, 1) as (sock,):
        sock.sendall(get("/healthz"))
        status, headers, _ = read_response(sock)
        assert status == 200 and headers.get("connection") != "close"
        sock.sendall(get("/healthz"))  # still open: a second request on the connection
        assert read_response(sock)[0] == 200
        started = time.monotonic()
        assert closed_by_server([sock], TIMEOUT + 2) == 1
        assert time.monotonic() - started >= TIMEOUT * 0.5


def test_pipelined_requests_are_all_answered(server: LiveServer) -> None:
    with sockets(server, 1, get("/healthz") + get("/healthz", b"Connection: close")) as (sock,):
        answers = b""
        while chunk := sock.recv(65536):  # the second asked the server to close
            answers += chunk
    assert answers.count(b"HTTP/1.1 200 OK\r\n") == 2
