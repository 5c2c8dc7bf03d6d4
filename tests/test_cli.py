"""The admin CLI as operators run it: one JSON object on stdout, errors on stderr."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from mnemos.config import Settings
from mnemos.domain.accounts import hash_key, own_token_claims
from mnemos.storage import open_store


def run(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mnemos", *args, "--database-url", f"sqlite:///{db}"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def ok(db: Path, *args: str) -> dict[str, Any]:
    done = run(db, *args)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_bootstrap_and_stored_state(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    org = ok(db, "admin", "create-org", "--name", "Acme")["id"]
    user = ok(db, "admin", "create-user", "--name", "Ann", "--email", "Ann@Acme.test", "--org", org)
    agent = ok(
        db, "admin", "create-agent", "--owner", user["id"], "--name", "Bot", "--description", "d"
    )
    assert user["api_key"].startswith("mn_user_") and agent["api_key"].startswith("mn_agent_")
    assert ok(db, "admin", "set-plan", "--user", user["id"], "--memory", "off") == {"ok": True}
    token = ok(db, "admin", "create-token", "--user", user["id"], "--ttl", "60")["token"]
    store = open_store(Settings(database_url=f"sqlite:///{db}"))
    try:
        ctx = store.agent_by_key(hash_key(agent["api_key"]))
        assert ctx is not None and str(ctx.agent.id) == agent["id"]
        assert ctx.organization is not None and str(ctx.organization.id) == org
        assert ctx.owner.email == "ann@acme.test" and ctx.owner.memory_enabled is False
        assert store.user_by_key(hash_key(user["api_key"])) is not None
        assert store.agent_by_key(hash_key(user["api_key"])) is None
        assert str(own_token_claims(store, token).user_id) == user["id"]
    finally:
        store.close()
    for path in tmp_path.glob("cli.db*"):
        raw = path.read_bytes()
        assert agent["api_key"].encode() not in raw and user["api_key"].encode() not in raw


@pytest.mark.parametrize(
    "args",
    [
        ("admin", "create-user", "--name", "X", "--email", "x@y.z", "--org", str(uuid.uuid4())),
        ("admin", "create-agent", "--owner", str(uuid.uuid4()), "--name", "X"),
        ("admin", "set-plan", "--org", str(uuid.uuid4()), "--memory", "on"),
        ("admin", "create-token", "--user", str(uuid.uuid4())),
        ("admin", "create-user", "--name", "X", "--email", "not-an-email"),
    ],
)
def test_refusals_exit_nonzero_with_a_json_error(tmp_path: Path, args: tuple[str, ...]) -> None:
    done = run(tmp_path / "cli.db", *args)
    assert done.returncode == 1 and done.stdout == ""
    assert json.loads(done.stderr)["error"]["code"] in {"not_found", "validation_failed"}


def test_usage_errors(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    assert run(db, "admin", "create-agent", "--owner", "nope", "--name", "X").returncode == 2
    assert run(db, "admin", "set-plan", "--memory", "on").returncode == 2


def test_migrate_is_idempotent(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    assert ok(db, "migrate")["ok"] is True
    assert ok(db, "migrate")["ok"] is True
