"""The crash script in small doses on every run: kill -9, SIGTERM, and (as root) a full disk.

`scripts/crash_test.py` runs the full-size versions; docs/reliability.md has their figures.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BACKENDS
from tests.live.conftest import _database_for

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "crash_test.py"


def crash(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600
    )
    assert done.stdout, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 0, result
    return result


@pytest.fixture(params=BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    databases = _database_for(request.param, tmp_path)
    yield next(databases)
    databases.close()


def test_kill_9_loses_nothing_acknowledged(database: str) -> None:
    result = crash("kill", "--kills", "3", "--writers", "3", "--database-url", database)
    assert result["acknowledged"] > 0 and result["missing"] == result["changed"] == 0
    # Every acknowledged memory is found by meaning once the restarted server has embedded it.
    assert result["embedding_queue_drained"] and result["unsearchable_by_meaning_in_sample"] == 0


def test_sigterm_drains_in_flight_requests(database: str) -> None:
    result = crash("sigterm", "--writers", "6", "--database-url", database)
    assert result["exit_code"] == 0 and result["cut_mid_response"] == 0


def can_mount_tmpfs(where: Path) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], check=False
    )
    subprocess.run(["umount", str(where)], check=False, capture_output=True)
    return mounted.returncode == 0


def test_full_disk_is_507_and_recovers(tmp_path: Path) -> None:
    if not can_mount_tmpfs(tmp_path / "probe"):
        pytest.skip("needs root and permission to mount a tmpfs")
    result = crash("diskfull")
    assert result["error_code"] == "insufficient_storage"
    assert result["reads_while_full"] and result["recovered"]
