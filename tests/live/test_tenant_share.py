"""One tenant's slow requests cannot take every request slot of a process (a real server).

Tenant A's slow requests are honest ones: downloads of its export that its client reads no
further (a small receive buffer, nothing read after the first bytes), which the server holds
until the client reads or leaves. A holds its share (`MNEMOS_MAX_IN_FLIGHT_PER_TENANT`) with them,
is refused past it while tenant B is served, and gets its slots back when its requests end,
fail or their clients leave.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import BACKENDS
from tests.live.conftest import LiveServer, _database_for, start_server, stop_server
from tests.world import memory_body

SHARE = 2
IN_FLIGHT = 2 * SHARE  # the process's cap: A alone could take all of it without a share
EXPORT = "/api/v1/me/memories/export"
AGENT = "/api/v1/agent/memories"
CONTENT_CHARS = 100_000
MEMORIES = 100  # 10 MB of export: more than the socket buffers between client and server (4 MB)
TIMEOUT = 15


@pytest.fixture(params=BACKENDS)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LiveServer]:
    databases = _database_for(request.param, tmp_path)
    settings = {
        "MNEMOS_EMBEDDER": "none",
        "MNEMOS_MAX_IN_FLIGHT": str(IN_FLIGHT),
        "MNEMOS_MAX_IN_FLIGHT_PER_TENANT": str(SHARE),
        "MNEMOS_MAX_CONTENT_CHARS": str(CONTENT_CHARS),
    }
    live = start_server(next(databases), tmp_path, settings=settings)
    yield live
    stop_server(live)
    databases.close()


def tenants(server: LiveServer) -> dict[str, str]:
    """Ann (a person of A) with many memories about her; an agent of A; an agent of B."""
    keys: dict[str, str] = {}
    for name in ("A", "B"):
        org = server.admin("create-org", "--name", name)["id"]
        server.admin("set-plan", "--org", org, "--memory", "on")
        who = server.admin("create-user", "--name", name, "--email", f"{name}@x.test", "--org", org)
        keys[f"{name}_person"] = who["api_key"]
        keys[f"{name}_user_id"] = who["id"]
        agent = server.admin("create-agent", "--owner", who["id"], "--name", f"{name} bot")
        keys[f"{name}_agent"] = agent["api_key"]
    body = memory_body("x" * CONTENT_CHARS, scope="subject", subject_id=keys["A_user_id"])
    with httpx.Client(base_url=server.base_url, timeout=60) as http:
        for _ in range(MEMORIES):
            stored = http.post(AGENT, json=body, headers={"X-API-Key": keys["A_agent"]})
            assert stored.status_code == 201, stored.text
    return keys


@contextlib.contextmanager
def slow_download(server: LiveServer, key: str) -> Iterator[bytes]:
    """An export whose client reads its first bytes and then nothing more, until it leaves:
    yields those bytes (the status line first)."""
    address = urlsplit(server.base_url)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: kept
        sock.settimeout(TIMEOUT)
        sock.connect((address.hostname, address.port))
        head = f"GET {EXPORT} HTTP/1.1\r\nHost: {address.netloc}\r\nX-API-Key: {key}\r\n\r\n"
        sock.sendall(head.encode())
        yield sock.recv(1024)
        # Leaving: the socket closes with unread bytes (a reset), as a client that gives up.


def status_of(first_bytes: bytes) -> int:
    return int(first_bytes.split(b" ", 2)[1])


def until_served(http: httpx.Client, key: str) -> httpx.Response:
    """A's next request, retried while it is refused for its share (its slots coming back)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        answer = http.get(AGENT, headers={"X-API-Key": key})
        if answer.status_code != 429 or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


def refused_for_share(answer: httpx.Response | bytes) -> dict[str, Any]:
    if isinstance(answer, bytes):
        assert status_of(answer) == 429, answer[:300]
        assert b"\r\nretry-after: 1\r\n" in answer.lower()
        return {}
    assert answer.status_code == 429, answer.text
    assert answer.headers["retry-after"] == "1"
    error: dict[str, Any] = answer.json()["error"]
    assert error["code"] == "tenant_busy"
    return error


def test_a_tenants_slow_requests_leave_other_tenants_served(server: LiveServer) -> None:
    keys = tenants(server)
    a_person, a_agent, b_agent = keys["A_person"], keys["A_agent"], keys["B_agent"]
    with httpx.Client(base_url=server.base_url, timeout=TIMEOUT) as http:
        # Requests that ended, in success or error, more of them than the share: none kept one.
        for path in (AGENT, f"{AGENT}/not-an-id", f"{AGENT}?limit=0", AGENT):
            assert http.get(path, headers={"X-API-Key": a_agent}).status_code in (200, 404, 422)
        with contextlib.ExitStack() as downloads:
            for _ in range(SHARE):
                first = downloads.enter_context(slow_download(server, a_person))
                assert status_of(first) == 200, first[:300]
            # A holds its share: its next requests are refused at once, whatever the route and
            # whichever of its callers, and take no slot of the process ...
            for _ in range(IN_FLIGHT):
                refused_for_share(downloads.enter_context(slow_download(server, a_person)))
            refused_for_share(http.get(AGENT, headers={"X-API-Key": a_agent}))
            # ... while B is served, at once.
            started = time.monotonic()
            served = http.get(AGENT, headers={"X-API-Key": b_agent})
            assert served.status_code == 200, served.text
            assert time.monotonic() - started < 5
            assert http.get(EXPORT, headers={"X-API-Key": keys["B_person"]}).status_code == 200
        # A's clients left mid-download: its slots come back, every one of them.
        assert until_served(http, a_agent).status_code == 200
        holds_its_share_again(server, http, a_person, a_agent)
        assert until_served(http, a_agent).status_code == 200
        # Downloads read to their end give their slots back too.
        for _ in range(SHARE + 1):
            whole = http.get(EXPORT, headers={"X-API-Key": a_person})
            assert whole.status_code == 200 and len(whole.text.splitlines()) == MEMORIES
        holds_its_share_again(server, http, a_person, a_agent)


def holds_its_share_again(server: LiveServer, http: httpx.Client, person: str, agent: str) -> None:
    """A takes every slot of its share again, and no more: then it leaves. A slot given back
    late (the server sees a client leave at its next write, and an export closes in a thread)
    is waited for; one never given back fails here."""
    with contextlib.ExitStack() as downloads:
        for _ in range(SHARE):
            deadline = time.monotonic() + TIMEOUT
            while True:
                attempt = contextlib.ExitStack()
                first = attempt.enter_context(slow_download(server, person))
                if status_of(first) == 200 or time.monotonic() > deadline:
                    break
                attempt.close()
                time.sleep(0.05)
            downloads.push(attempt)
            assert status_of(first) == 200, first[:300]
        refused_for_share(http.get(AGENT, headers={"X-API-Key": agent}))
