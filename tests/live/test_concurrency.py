"""8 writers and 8 readers against a live server: no errors, no lost writes, stable pages.

Runs `MNEMOS_CONCURRENCY_SECONDS` (default 20) on each backend. Readers walk cursor pages while
writes go on, and check that a walk holds no duplicate and misses nothing that was acknowledged
before it started.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import BACKENDS
from tests.live.conftest import LiveServer, _database_for, start_server, stop_server
from tests.world import memory_body

BASE = "/api/v1/agent/memories"
SECONDS = float(os.environ.get("MNEMOS_CONCURRENCY_SECONDS", "20"))
WRITERS = READERS = 8


@pytest.fixture(params=BACKENDS)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LiveServer]:
    databases = _database_for(request.param, tmp_path)
    live = start_server(next(databases), tmp_path)
    yield live
    stop_server(live)
    databases.close()


class Ledger:
    """What the server acknowledged, in order, shared by every thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: dict[str, str] = {}
        self.problems: list[str] = []
        self.walks = 0

    def ack(self, ident: str, content: str) -> None:
        with self.lock:
            self.acked[ident] = content

    def snapshot(self) -> set[str]:
        with self.lock:
            return set(self.acked)

    def problem(self, text: str) -> None:
        with self.lock:
            self.problems.append(text)


def writer(base_url: str, key: str, n: int, ledger: Ledger, stop: float) -> None:
    with httpx.Client(base_url=base_url, headers={"X-API-Key": key}, timeout=30) as http:
        i = 0
        while time.monotonic() < stop:
            content = f"writer {n} note {i}"
            response = http.post(BASE, json=memory_body(content, scope="organization"))
            if response.status_code != 201:
                ledger.problem(f"store {response.status_code}: {response.text[:200]}")
                continue
            ledger.ack(response.json()["data"]["id"], content)
            i += 1


def walk(http: httpx.Client, params: dict[str, Any], ledger: Ledger) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        query = {**params, "limit": 100, **({"cursor": cursor} if cursor else {})}
        response = http.get(BASE, params=query)
        if response.status_code != 200:
            ledger.problem(f"list {response.status_code}: {response.text[:200]}")
            return ids
        body = response.json()
        ids += [row["id"] for row in body["data"]]
        cursor = body["meta"]["next_cursor"]
        if cursor is None:
            return ids


def reader(base_url: str, key: str, n: int, ledger: Ledger, stop: float) -> None:
    params = {"memory_scope": "org", "scope": "all" if n % 2 else "organization"}
    with httpx.Client(base_url=base_url, headers={"X-API-Key": key}, timeout=30) as http:
        while time.monotonic() < stop:
            before = ledger.snapshot()
            ids = walk(http, params, ledger)
            if len(ids) != len(set(ids)):
                ledger.problem(f"reader {n}: {len(ids) - len(set(ids))} duplicates in one walk")
            missing = before - set(ids)
            if missing:
                ledger.problem(f"reader {n}: {len(missing)} acknowledged rows missing from a walk")
            with ledger.lock:
                ledger.walks += 1


def test_concurrent_writers_and_readers(server: LiveServer) -> None:
    org = server.admin("create-org", "--name", "Busy")["id"]
    user = server.admin("create-user", "--name", "B", "--email", "b@busy.test", "--org", org)
    keys = [
        server.admin("create-agent", "--owner", user["id"], "--name", f"A{i}")["api_key"]
        for i in range(2)
    ]
    ledger = Ledger()
    stop = time.monotonic() + SECONDS
    threads = [
        threading.Thread(target=writer, args=(server.base_url, keys[i % 2], i, ledger, stop))
        for i in range(WRITERS)
    ] + [
        threading.Thread(target=reader, args=(server.base_url, keys[i % 2], i, ledger, stop))
        for i in range(READERS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=SECONDS + 120)
    assert ledger.problems == []
    assert len(ledger.acked) > WRITERS and ledger.walks >= READERS
    with httpx.Client(base_url=server.base_url, headers={"X-API-Key": keys[0]}, timeout=30) as http:
        everything = walk(http, {"memory_scope": "org"}, ledger)
        assert sorted(everything) == sorted(ledger.acked)
        for ident in list(ledger.acked)[:: max(1, len(ledger.acked) // 200)]:
            assert http.get(f"{BASE}/{ident}").json()["data"]["content"] == ledger.acked[ident]
    print(f"\n{server.process.args}: {len(ledger.acked)} writes, {ledger.walks} walks")  # noqa: T201
