"""The admin CLI as operators run it: one JSON object on stdout, errors on stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mnemos.config import Settings
from mnemos.domain.accounts import hash_key, issue_token, own_token_claims
from mnemos.domain.tenants import Tenants
from mnemos.domain.tokens import TokenVerifier
from mnemos.errors import Unauthorized
from mnemos.storage import open_store
from mnemos.storage.base import Store
from tests.api.test_band_agent import store as store_memory
from tests.world import World


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
    ok(tmp_path / "cli.db", "migrate")
    done = run(tmp_path / "cli.db", *args)
    assert done.returncode == 1 and done.stdout == ""
    assert json.loads(done.stderr)["error"]["code"] in {"not_found", "validation_failed"}


SOMEONE = str(uuid.uuid4())


@pytest.mark.parametrize(
    "args",
    [
        ("admin", "erase-subject", "--user", SOMEONE, "--yes"),
        ("admin", "export-subject", "--user", SOMEONE, "--out", "{tmp}/out.ndjson"),
        ("admin", "rotate-key", "--user", SOMEONE),
        ("admin", "revoke-tokens", "--user", SOMEONE),
        ("admin", "set-retention", "--org", SOMEONE, "--system", "working", "--days", "3"),
        ("admin", "set-plan", "--org", SOMEONE, "--memory", "off"),
        ("export", "--out", "{tmp}/all.ndjson"),
        ("mcp", "--api-key", "mn_agent_x"),
    ],
)
def test_a_command_on_a_database_that_is_not_there_creates_none(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """A mistyped SQLite path is refused, not made into an empty database that an erasure of
    0 memories or an empty export then reports on as if it were the real one."""
    mistyped = tmp_path / "mnemos.bd"
    done = run(mistyped, *(arg.replace("{tmp}", str(tmp_path)) for arg in args))
    assert done.returncode == 1 and done.stdout == "", done.stderr
    error = json.loads(done.stderr.strip().splitlines()[-1])["error"]
    assert error["code"] == "database_missing" and str(mistyped) in error["message"]
    assert list(tmp_path.iterdir()) == []


def test_doctor_reports_a_database_that_is_not_there_without_creating_it(tmp_path: Path) -> None:
    done = run(tmp_path / "mnemos.bd", "doctor", "--json")
    assert done.returncode == 1
    found = {f["check"]: f for f in json.loads(done.stdout)["findings"]}
    assert found["database"]["level"] == "problem" and "no database" in found["database"]["detail"]
    assert list(tmp_path.iterdir()) == []


def test_export_of_a_database_without_the_schema_is_a_clear_refusal(tmp_path: Path) -> None:
    import sqlite3

    sqlite3.connect(tmp_path / "other.db").execute("CREATE TABLE t (x)").connection.close()
    done = run(tmp_path / "other.db", "export", "--out", str(tmp_path / "all.ndjson"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert json.loads(done.stderr)["error"]["code"] == "transfer_refused"
    assert not (tmp_path / "all.ndjson").exists()


def test_usage_errors(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    assert run(db, "admin", "create-agent", "--owner", "nope", "--name", "X").returncode == 2
    assert run(db, "admin", "set-plan", "--memory", "on").returncode == 2


def test_migrate_is_idempotent(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    assert ok(db, "migrate")["ok"] is True
    assert ok(db, "migrate")["ok"] is True


# --- credentials, on every backend ---------------------------------------------------------


def admin(database_url: str, *args: str, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "mnemos", "admin", *args, "--database-url", database_url],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def admin_ok(database_url: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = admin(database_url, *args, env=env)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_rotate_keys(database_url: str, store: Store, world: World, client: TestClient) -> None:
    ann = world.user("Ann", "acme")
    bot = world.agent(ann)
    reach = Tenants((bot.tenant,))
    memory = store.get_memory(
        uuid.UUID(store_memory(client, bot, "survives rotation")["id"]), reach
    )
    agent_key = admin_ok(database_url, "rotate-key", "--agent", bot.id)
    assert list(agent_key) == ["api_key"] and agent_key["api_key"].startswith("mn_agent_")
    assert store.agent_by_key(hash_key(bot.api_key)) is None
    ctx = store.agent_by_key(hash_key(agent_key["api_key"]))
    assert ctx is not None and str(ctx.agent.id) == bot.id
    assert store.get_memory(memory.id, reach) == memory
    user_key = admin_ok(database_url, "rotate-key", "--user", ann.id)
    assert list(user_key) == ["api_key"] and user_key["api_key"].startswith("mn_user_")
    assert store.user_by_key(hash_key(ann.api_key)) is None
    assert store.user_by_key(hash_key(user_key["api_key"])) is not None
    assert store.agent_by_key(hash_key(agent_key["api_key"])) is not None  # agents unaffected


def test_revoke_tokens(database_url: str, store: Store, world: World) -> None:
    ann = world.user("Ann", "acme")
    verifier = TokenVerifier(Settings(database_url=database_url), store)
    before = issue_token(store, uuid.UUID(ann.id), 600)
    assert str(verifier.user(before).user.id) == ann.id
    revoked = admin_ok(database_url, "revoke-tokens", "--user", ann.id)
    assert revoked["ok"] is True and revoked["tokens_valid_after"].endswith("Z")
    after = admin_ok(database_url, "create-token", "--user", ann.id, "--ttl", "60")["token"]
    with pytest.raises(Unauthorized):
        verifier.user(before)
    assert str(verifier.user(after).user.id) == ann.id
    assert store.user_by_key(hash_key(ann.api_key)) is not None


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("rotate-key", "--agent", str(uuid.uuid4())), 1),
        (("rotate-key", "--user", str(uuid.uuid4())), 1),
        (("revoke-tokens", "--user", str(uuid.uuid4())), 1),
        (("rotate-key",), 2),
        (("rotate-key", "--agent", str(uuid.uuid4()), "--user", str(uuid.uuid4())), 2),
        (("revoke-tokens",), 2),
        # As `set-retention` answers an organization that is not there (it answered 0).
        (("restore-expired", "--org", str(uuid.uuid4()), "--system", "working"), 1),
    ],
)
def test_operator_command_refusals(database_url: str, args: tuple[str, ...], code: int) -> None:
    done = admin(database_url, *args)
    assert done.returncode == code and done.stdout == ""
    if code == 1:
        assert json.loads(done.stderr)["error"]["code"] == "not_found"


def test_agents_per_person_cap(database_url: str, world: World) -> None:
    ann = world.user("Ann", "acme")
    cap = {"MNEMOS_MAX_AGENTS_PER_USER": "1"}
    admin_ok(database_url, "create-agent", "--owner", ann.id, "--name", "One", env=cap)
    done = admin(database_url, "create-agent", "--owner", ann.id, "--name", "Two", env=cap)
    assert done.returncode == 1 and done.stdout == ""
    assert json.loads(done.stderr)["error"]["code"] == "agent_limit_reached"


def test_restore_expired_undoes_a_policy_from_the_command_line(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    org = ok(db, "admin", "create-org", "--name", "Acme")["id"]
    ok(db, "admin", "set-retention", "--org", org, "--system", "working", "--days", "0")
    done = ok(db, "admin", "restore-expired", "--org", org, "--system", "working")
    assert done == {"org": org, "system": "working", "restored": 0}
    assert run(db, "admin", "restore-expired", "--org", org, "--system", "semantic").returncode == 2
