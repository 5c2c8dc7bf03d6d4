"""Crash, stop and fill-the-disk tests against a live `mnemos serve`.

    python scripts/crash_test.py kill --database-url URL --kills 20     # kill -9 while writing
    python scripts/crash_test.py sigterm --database-url URL             # graceful stop mid-traffic
    python scripts/crash_test.py diskfull                               # SQLite on a tiny tmpfs

Each prints one JSON object of figures and exits non-zero if anything acknowledged was lost, a
database check failed, or the server misbehaved. Only loopback traffic; every loop is bounded.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from mnemos.config import Settings
from mnemos.domain import accounts
from mnemos.storage import migrate, open_store
from mnemos.storage.postgres import driver_url

BASE = "/api/v1/agent/memories"
BTREE_INDEXES = (
    "SELECT c.oid::regclass::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
    "JOIN pg_am a ON a.oid = c.relam "
    "WHERE a.amname = 'btree' AND i.indrelid = 'memories'::regclass"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bootstrap(url: str) -> str:
    """Migrate and create one agent; its API key."""
    settings = Settings(database_url=url)
    migrate(settings)
    store = open_store(settings)
    try:
        org = accounts.create_organization(store, "Crash")
        user = accounts.create_user(store, "Crash", f"crash-{uuid.uuid4().hex[:8]}@test", org.id)
        return accounts.create_agent(store, user.user.id, "Crash", None).api_key
    finally:
        store.close()


STARTED: list[subprocess.Popen[bytes]] = []


@atexit.register
def _stop_leftovers() -> None:
    """Whatever happens to a test, no server it started outlives the script."""
    for process in STARTED:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


class Server:
    def __init__(self, url: str, log: Path):
        self.url, self.log = url, log
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "MNEMOS_DATABASE_URL": self.url, "MNEMOS_RATE_LIMIT_PER_MINUTE": "0"}
        command = [
            sys.executable,
            "-m",
            "mnemos",
            "serve",
            "--port",
            str(self.port),
            "--log-level",
            "warning",
        ]
        self.process = subprocess.Popen(
            command, env=env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT
        )
        STARTED.append(self.process)
        deadline = time.monotonic() + 180  # loading the local model is slow on a busy machine
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}")
            try:
                if httpx.get(f"{self.base}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not become healthy")

    def signal(self, sig: int) -> int:
        assert self.process is not None
        self.process.send_signal(sig)
        return self.process.wait(timeout=60)


@dataclass
class Ledger:
    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[str, str] = field(default_factory=dict)
    attempts: int = 0
    refused: int = 0
    broken: list[str] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)


def writer(
    base: str, key: str, n: int, ledger: Ledger, stop: threading.Event, keepalive: bool = True
) -> None:
    # Without keep-alive every request opens its own connection, so a request is either refused
    # (nobody listening) or in flight; an idle kept-alive connection closed at shutdown would
    # otherwise look like a request cut mid-way.
    limits = httpx.Limits(max_keepalive_connections=None if keepalive else 0)
    seq = 0
    with httpx.Client(headers={"X-API-Key": key}, timeout=10, limits=limits) as http:
        while not stop.is_set():
            seq += 1
            content = f"writer{n} seq{seq} token{uuid.uuid4().hex}"
            body = {
                "memory": {
                    "content": content,
                    "system": "long_term",
                    "type": "semantic",
                    "segment": "user",
                    "thought": "crash",
                }
            }
            with ledger.lock:
                ledger.attempts += 1
            try:
                response = http.post(f"{base}{BASE}", json=body)
            except (
                httpx.ConnectError,
                httpx.RemoteProtocolError,
                httpx.ReadError,
                httpx.WriteError,
                httpx.TimeoutException,
            ) as exc:
                with ledger.lock:
                    ledger.refused += 1
                    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
                        ledger.broken.append(content)
                time.sleep(0.05)
                continue
            with ledger.lock:
                ledger.statuses[response.status_code] = (
                    ledger.statuses.get(response.status_code, 0) + 1
                )
                if response.status_code == 201:
                    ledger.acked[response.json()["data"]["id"]] = content


def verify(server: Server, key: str, ledger: Ledger) -> dict[str, Any]:
    """Every acknowledged write present and intact, searchable, and the database sound."""
    missing, changed = 0, 0
    with httpx.Client(base_url=server.base, headers={"X-API-Key": key}, timeout=30) as http:
        for ident, content in ledger.acked.items():
            response = http.get(f"{BASE}/{ident}")
            if response.status_code != 200:
                missing += 1
            elif response.json()["data"]["content"] != content:
                changed += 1
        sample = random.Random(1).sample(sorted(ledger.acked.items()), min(50, len(ledger.acked)))
        unsearchable = 0
        for ident, content in sample:
            token = content.rsplit("token", 1)[1]
            found = http.get(BASE, params={"content_query": f"token{token}"}).json()["data"]
            unsearchable += [m["id"] for m in found] != [ident]
        # Recall by meaning: every acknowledged memory was queued with it, so once the server's
        # embedding worker has emptied the queue, each one is found by its own text.
        drained = wait_for_embeddings(server.url)
        by_meaning = 0
        for ident, content in sample:
            if len(content) > 500:  # longer than a query may be (the disk-full test's fillers)
                continue
            params = {"query": content, "mode": "semantic", "limit": 1}
            answer = http.get(f"{BASE}/search", params=params)
            assert answer.status_code == 200, answer.text
            found = answer.json()["data"]
            by_meaning += [m["id"] for m in found] != [ident]
    return {
        "missing": missing,
        "changed": changed,
        "unsearchable_in_sample": unsearchable,
        "embedding_queue_drained": drained,
        "unsearchable_by_meaning_in_sample": by_meaning,
        "integrity": integrity(server.url),
    }


def wait_for_embeddings(url: str, seconds: float = 600) -> bool:
    """Wait until no memory waits to be embedded (the server's worker drains the queue)."""
    engine = sa.create_engine(url if url.startswith("sqlite") else driver_url(url))
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                if not conn.exec_driver_sql("SELECT count(*) FROM vector_queue").scalar_one():
                    return True
            time.sleep(0.2)
        return False
    finally:
        engine.dispose()


def integrity(url: str) -> str:
    if url.startswith("sqlite"):
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            verdict = str(conn.exec_driver_sql("PRAGMA integrity_check").scalar_one())
            conn.exec_driver_sql(
                "INSERT INTO memories_fts(memories_fts, rank) VALUES ('integrity-check', 1)"
            )
        engine.dispose()
        return verdict
    engine = sa.create_engine(driver_url(url))
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS amcheck")
        indexes = conn.exec_driver_sql(BTREE_INDEXES).scalars().all()
        for index in indexes:
            conn.exec_driver_sql(f"SELECT bt_index_check('{index}'::regclass, true)")
    engine.dispose()
    return f"ok (amcheck on {len(indexes)} indexes)"


def run_writers(
    server: Server, key: str, count: int, ledger: Ledger, keepalive: bool = True
) -> tuple[threading.Event, list[threading.Thread]]:
    stop = threading.Event()
    threads = [
        threading.Thread(
            target=writer, args=(server.base, key, n, ledger, stop, keepalive), daemon=True
        )
        for n in range(count)
    ]
    for thread in threads:
        thread.start()
    return stop, threads


def kill_test(url: str, kills: int, writers: int, work: Path) -> dict[str, Any]:
    key = bootstrap(url)
    server = Server(url, work / "server.log")
    server.start()
    ledger = Ledger()
    stop, threads = run_writers(server, key, writers, ledger)
    rng = random.Random(42)
    for _ in range(kills):
        time.sleep(rng.uniform(0.3, 1.5))
        server.signal(signal.SIGKILL)
        server.start()
    time.sleep(0.5)
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    result = {
        "test": "kill -9",
        "database": url.split(":")[0],
        "kills": kills,
        "writers": writers,
        "attempts": ledger.attempts,
        "acknowledged": len(ledger.acked),
        "statuses": ledger.statuses,
        **verify(server, key, ledger),
    }
    server.signal(signal.SIGTERM)
    return result


def sigterm_test(url: str, writers: int, work: Path) -> dict[str, Any]:
    key = bootstrap(url)
    server = Server(url, work / "server.log")
    server.start()
    ledger = Ledger()
    stop, threads = run_writers(server, key, writers, ledger, keepalive=False)
    time.sleep(2)
    started = time.monotonic()
    exit_code = server.signal(signal.SIGTERM)
    stopped_in = time.monotonic() - started
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    server.start()
    # A connection the kernel queued but the server never accepted is reset at shutdown: the
    # client sees it as cut, but nothing was processed. A request processed without an answer
    # would be stored: that is what must never happen.
    with httpx.Client(base_url=server.base, headers={"X-API-Key": key}, timeout=30) as http:
        processed = sum(
            bool(http.get(BASE, params={"content_query": c.rsplit(" ", 1)[1]}).json()["data"])
            for c in ledger.broken
        )
    result = {
        "test": "sigterm",
        "database": url.split(":")[0],
        "exit_code": exit_code,
        "stopped_in_s": round(stopped_in, 2),
        "acknowledged": len(ledger.acked),
        "reset_before_processing": len(ledger.broken) - processed,
        "cut_mid_response": processed,
        **verify(server, key, ledger),
    }
    server.signal(signal.SIGTERM)
    return result


def diskfull_test(work: Path) -> dict[str, Any]:
    mount = work / "tiny"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], check=True)
    try:
        url = f"sqlite:///{mount / 'mnemos.db'}"
        key = bootstrap(url)
        server = Server(url, work / "server.log")
        server.start()
        codes: dict[int, int] = {}
        acked: dict[str, str] = {}
        with httpx.Client(base_url=server.base, headers={"X-API-Key": key}, timeout=30) as http:
            for i in range(20_000):  # bounded: the disk fills long before this
                content = f"fill {i} {'x' * 2000} token{uuid.uuid4().hex}"
                body = {
                    "memory": {
                        "content": content,
                        "system": "long_term",
                        "type": "semantic",
                        "segment": "user",
                        "thought": "t",
                    }
                }
                response = http.post(BASE, json=body)
                codes[response.status_code] = codes.get(response.status_code, 0) + 1
                if response.status_code == 201:
                    acked[response.json()["data"]["id"]] = content
                elif response.status_code in (503, 507):
                    full_error = response.json()["error"]["code"]
                    break
            else:
                raise RuntimeError("the disk never filled")
            reads_ok = http.get(BASE, params={"limit": 5}).status_code == 200
            subprocess.run(["mount", "-o", "remount,size=64m", str(mount)], check=True)
            after = http.post(
                BASE,
                json={
                    "memory": {
                        "content": "after space returned",
                        "system": "long_term",
                        "type": "semantic",
                        "segment": "user",
                        "thought": "t",
                    }
                },
            )
            recovered = after.status_code == 201
        ledger = Ledger(acked=acked)
        result = {
            "test": "disk full",
            "database": "sqlite",
            "acknowledged": len(acked),
            "statuses": codes,
            "error_code": full_error,
            "reads_while_full": reads_ok,
            "recovered": recovered,
            **verify(server, key, ledger),
        }
        server.signal(signal.SIGTERM)
        return result
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("test", choices=["kill", "sigterm", "diskfull"])
    parser.add_argument("--database-url", default="")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--writers", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mnemos-crash-") as tmp:
        work = Path(tmp)
        url = args.database_url or f"sqlite:///{work / 'crash.db'}"
        if args.test == "kill":
            result = kill_test(url, args.kills, args.writers, work)
        elif args.test == "sigterm":
            result = sigterm_test(url, args.writers, work)
        else:
            result = diskfull_test(work)
    print(json.dumps(result))  # noqa: T201
    failed = (
        result["missing"]
        or result["changed"]
        or result["unsearchable_in_sample"]
        or result.get("unsearchable_by_meaning_in_sample")
        or result.get("embedding_queue_drained") is False
    )
    failed = failed or not str(result["integrity"]).startswith("ok")
    if args.test == "sigterm":
        failed = failed or result["exit_code"] != 0 or result["cut_mid_response"]
    if args.test == "diskfull":
        failed = failed or not (result["reads_while_full"] and result["recovered"])
        failed = failed or result["error_code"] != "insufficient_storage"
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
