"""Backups: `mnemos backup` of SQLite while writers run (then restored and compared), and the
PostgreSQL drill of docs/operations.md (pg_dump, restore into a fresh database, same answers)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from mnemos.storage.backup import integrity
from tests.api.test_visibility_world import build
from tests.live.conftest import _database_for
from tests.test_transfer import answers, client_on, dump, rows_of
from tests.world import World, memory_body

AGENT = "/api/v1/agent/memories"


def _run_backup(url: str, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mnemos", "backup", "--out", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "MNEMOS_DATABASE_URL": url},
        timeout=300,
    )


def _backup(url: str, out: Path) -> dict[str, object]:
    done = _run_backup(url, out)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_sqlite_backup_while_writers_run_then_restore(
    client: TestClient, world: World, database_url: str, tmp_path: Path
) -> None:
    if not database_url.startswith("sqlite"):
        pytest.skip("mnemos backup copies SQLite; PostgreSQL has its drill below")
    people, agents, _ = build(client, world)
    stop = threading.Event()
    written: list[str] = []

    def writer(headers: dict[str, str]) -> None:
        n = 0
        while not stop.is_set() and n < 2000:
            response = client.post(AGENT, json=memory_body(f"written {n}"), headers=headers)
            assert response.status_code == 201, response.text
            written.append(response.json()["data"]["id"])
            n += 1

    threads = [threading.Thread(target=writer, args=(a.headers,)) for a in agents[:2]]
    for thread in threads:
        thread.start()
    try:
        while len(written) < 20:  # writers are under way
            threading.Event().wait(0.01)
        during = tmp_path / "during.db"
        result = _backup(database_url, during)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert result["integrity_check"] == "ok" and integrity(during) == "ok"
    # The copy holds one committed state: a prefix of each writer's memories, whole.
    with sqlite3.connect(during) as copy:
        copied = {row[0] for row in copy.execute("SELECT hex(id) FROM memories")}
    with sqlite3.connect(database_url.removeprefix("sqlite:///")) as live:
        source = {row[0] for row in live.execute("SELECT hex(id) FROM memories")}
    assert copied <= source and len(copied) < len(source)

    # Restore: the copy serves; a quiet backup answers exactly as the source does.
    restored = tmp_path / "restored.db"
    shutil.copy(during, restored)
    with client_on(f"sqlite:///{restored}") as back:
        assert back.get(AGENT, headers=agents[0].headers).status_code == 200
    quiet = tmp_path / "quiet.db"
    _backup(database_url, quiet)
    cursors: dict[str, str] = {}
    expected = answers(client, people, agents, cursors)
    with client_on(f"sqlite:///{quiet}") as back:
        assert answers(back, people, agents, cursors) == expected
    assert rows_of(dump(f"sqlite:///{quiet}")) == rows_of(dump(database_url))


def test_backup_of_postgresql_points_at_pgdump(database_url: str, tmp_path: Path) -> None:
    if database_url.startswith("sqlite"):
        pytest.skip("PostgreSQL only")
    done = subprocess.run(
        [sys.executable, "-m", "mnemos", "backup", "--out", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        env={**os.environ, "MNEMOS_DATABASE_URL": database_url},
        timeout=120,
    )
    assert done.returncode == 1
    assert json.loads(done.stderr)["error"]["code"] == "backup_failed"
    assert "pg_dump" in done.stderr


@pytest.mark.usefixtures("store")  # the database is there
def test_a_backup_into_a_directory_that_is_not_there_is_refused_in_the_usual_shape(
    database_url: str, tmp_path: Path
) -> None:
    """`--out` in a directory that does not exist is the JSON refusal (it was a traceback)."""
    if not database_url.startswith("sqlite"):
        pytest.skip("SQLite only (PostgreSQL: pg_dump)")
    done = _run_backup(database_url, tmp_path / "missing" / "x.db")
    assert done.returncode == 1, done
    refusal = json.loads(done.stderr.strip().splitlines()[-1])["error"]
    assert refusal["code"] == "backup_failed" and "missing" in refusal["message"], done.stderr


def test_postgresql_restore_drill(
    client: TestClient, world: World, database_url: str, tmp_path: Path
) -> None:
    """docs/operations.md: pg_dump -Fc, pg_restore into a fresh database, same answers."""
    if database_url.startswith("sqlite"):
        pytest.skip("PostgreSQL only")
    if shutil.which("pg_dump") is None or shutil.which("pg_restore") is None:
        pytest.skip("pg_dump and pg_restore are not installed")
    people, agents, _ = build(client, world)
    cursors: dict[str, str] = {}
    expected = answers(client, people, agents, cursors)
    dump = tmp_path / "mnemos.dump"
    subprocess.run(
        ["pg_dump", "--format=custom", "--no-owner", f"--file={dump}", database_url],
        check=True,
        timeout=300,
    )
    # The target is created empty (no migrations): pg_restore brings schema and data.
    with fresh_empty_postgres(tmp_path) as target:
        subprocess.run(
            ["pg_restore", "--no-owner", "--exit-on-error", f"--dbname={target}", str(dump)],
            check=True,
            timeout=300,
        )
        with client_on(target) as restored:
            assert answers(restored, people, agents, cursors) == expected
            response = restored.post(AGENT, json=memory_body("after"), headers=agents[0].headers)
            assert response.status_code == 201, response.text


@contextmanager
def fresh_empty_postgres(tmp_path: Path) -> Iterator[str]:
    """A new PostgreSQL database with nothing in it (not even migrations)."""
    databases = _database_for("postgresql", tmp_path)
    try:
        yield next(databases)
    finally:
        databases.close()
