"""Several Mnemos processes on one database share everything: data, cursors, keys, plans."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import BACKENDS
from tests.live.conftest import LiveServer, _database_for, start_server, stop_server
from tests.world import memory_body

BASE = "/api/v1/agent/memories"


@pytest.fixture(params=BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    databases = _database_for(request.param, tmp_path)
    yield next(databases)
    databases.close()


def test_what_one_process_writes_the_other_serves_at_once(database: str, tmp_path: Path) -> None:
    first = start_server(database, tmp_path)
    second = start_server(database, tmp_path)
    try:
        org = first.admin("create-org", "--name", "Shared")["id"]
        user = first.admin("create-user", "--name", "U", "--email", "u@shared.test", "--org", org)
        agent = second.admin("create-agent", "--owner", user["id"], "--name", "A")
        headers = {"X-API-Key": agent["api_key"]}
        with (
            httpx.Client(base_url=first.base_url, headers=headers) as a,
            httpx.Client(base_url=second.base_url, headers=headers) as b,
        ):
            written = []
            for i in range(5):
                response = a.post(BASE, json=memory_body(f"note {i}", scope="organization"))
                assert response.status_code == 201
                written.append(response.json()["data"])
                assert b.get(f"{BASE}/{written[-1]['id']}").json()["data"] == written[-1]
            page = a.get(BASE, params={"limit": 2}).json()
            rest = b.get(BASE, params={"limit": 10, "cursor": page["meta"]["next_cursor"]}).json()
            seen = [m["content"] for m in page["data"] + rest["data"]]
            assert seen == [f"note {i}" for i in reversed(range(5))]
            first.admin("set-plan", "--org", org, "--memory", "off")
            assert b.get(BASE).json()["error"]["code"] == "plan_required"
            assert a.get(BASE).status_code == 403
    finally:
        stop_server(first)
        stop_server(second)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def test_workers_flag_runs_several_processes(database: str, tmp_path: Path) -> None:
    server: LiveServer = start_server(database, tmp_path, "--workers", "2")
    try:
        org = server.admin("create-org", "--name", "W")["id"]
        user = server.admin("create-user", "--name", "W", "--email", "w@w.test", "--org", org)
        agent = server.admin("create-agent", "--owner", user["id"], "--name", "W")
        workers = _workers(server.process.pid)
        assert len(workers) == 2
        with httpx.Client(
            base_url=server.base_url, headers={"X-API-Key": agent["api_key"]}
        ) as http:
            ids = [
                http.post(BASE, json=memory_body(f"w{i}")).json()["data"]["id"] for i in range(20)
            ]
            for ident in ids:
                assert http.get(f"{BASE}/{ident}").status_code == 200
            listed = http.get(BASE, params={"limit": 100}).json()["data"]
            assert [m["id"] for m in listed] == list(reversed(ids))
        # Each worker listens on its own SO_REUSEPORT socket: the kernel spreads connections.
        assert _listening_sockets(server.base_url) == 2
        # A worker that dies is replaced; the others serve meanwhile.
        os.kill(workers[0], signal.SIGKILL)
        # The dead worker is gone once the parent has reaped it (a dying process's cmdline is
        # already empty, and its socket may still listen for a moment), and its replacement
        # listens only once its app has started.
        deadline = time.monotonic() + 60
        while workers[0] in _children(server.process.pid) or (
            _listening_sockets(server.base_url) < 2
        ):
            assert time.monotonic() < deadline, "the dead worker was not replaced"
            time.sleep(0.2)
        replacement = set(_workers(server.process.pid)) - set(workers)
        assert len(replacement) == 1 and len(_workers(server.process.pid)) == 2
        with httpx.Client(base_url=server.base_url, headers={"X-API-Key": agent["api_key"]}) as h:
            for _ in range(10):
                assert h.get(BASE).status_code == 200
        server.process.terminate()
        assert server.process.wait(timeout=30) == 0  # the workers drained, then the parent left
    finally:
        stop_server(server)


def _workers(pid: int) -> list[int]:
    """The server's worker processes (not multiprocessing's resource tracker)."""
    found = []
    for child in _children(pid):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in command:
            found.append(child)
    return found


def _listening_sockets(base_url: str) -> int:
    port = int(base_url.rsplit(":", 1)[1])
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(
        1 for line in lines if line.split()[1].endswith(f":{port:04X}") and line.split()[3] == "0A"
    )
