"""A real `mnemos serve` on a loopback port, bootstrapped with the real admin CLI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from mnemos.storage.postgres import driver_url
from tests.conftest import BACKENDS, POSTGRES_URL

ROOT = str(Path(__file__).resolve().parents[2])  # the repository: `tests` is importable from it


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def mnemos(*args: str, env: dict[str, str]) -> dict[str, Any]:
    """Run the real CLI and parse the one JSON object it prints."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.watched", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@dataclass
class LiveServer:
    base_url: str
    env: dict[str, str]
    process: subprocess.Popen[bytes]
    log: Path
    keys: dict[str, dict[str, Any]] = field(default_factory=dict)

    def admin(self, *args: str) -> dict[str, Any]:
        return mnemos("admin", *args, env=self.env)


def _database_for(backend: str, tmp: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp / 'live.db'}"
        return
    name = f"mnemos_live_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(driver_url(POSTGRES_URL), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.engine.make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    try:
        yield url.replace("postgresql+psycopg://", "postgresql://")
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def start_server(
    database_url: str, tmp: Path, *extra: str, settings: dict[str, str] | None = None
) -> LiveServer:
    """`settings` adds environment variables (`MNEMOS_...`) for the server."""
    port = free_port()
    env = {
        **os.environ,
        "MNEMOS_DATABASE_URL": database_url,
        "MNEMOS_RATE_LIMIT_PER_MINUTE": "0",
        # `-m tests.watched` from any working directory
        "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
        **(settings or {}),
    }
    log = tmp / f"server-{port}.log"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.watched",  # `mnemos`, with the suite's tenant check (tests/watched.py)
            "serve",
            "--port",
            str(port),
            "--log-level",
            "warning",
            *extra,
        ],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    server = LiveServer(f"http://127.0.0.1:{port}", env, process, log)
    deadline = time.monotonic() + 120  # two workers each load the embedder: slow on a busy machine
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text()}")
        try:
            if httpx.get(f"{server.base_url}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"server did not start: {log.read_text()}")


def stop_server(server: LiveServer) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.process.kill()


@pytest.fixture(scope="module", params=BACKENDS)
def live(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("live")
    databases = _database_for(request.param, tmp)
    url = next(databases)
    server = start_server(url, tmp)
    try:
        yield server
    finally:
        stop_server(server)
        databases.close()
