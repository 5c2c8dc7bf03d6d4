"""Findings of the hostile live review "review10" (2026-12-05), each reproduced through the app
or the real command line, on both backends where the finding applies.

Each test failed on the code it was written against (a strict xfail then) and passes since its
finding was fixed (docs/decisions.md, "Second hostile review").
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain.accounts import hash_key
from mnemos.domain.ids import utcnow
from mnemos.storage import migrate
from mnemos.storage.base import Store
from mnemos.storage.transfer import TransferError, export_database
from mnemos.storage.transfer_import import import_database
from tests.api.test_tuya_hardening import DEVICES, Tuya, entry, project, signed  # noqa: F401
from tests.api.test_ui_http import sign_in as ui_sign_in
from tests.world import World, memory_body

AGENT = "/api/v1/agent/memories"


def _mnemos(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command line against `database_url`."""
    return subprocess.run(
        [sys.executable, "-m", "mnemos", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "MNEMOS_DATABASE_URL": database_url},
        timeout=300,
    )


def _sqlite_file(database_url: str) -> Path:
    if not database_url.startswith("sqlite"):
        pytest.skip("SQLite only")
    return Path(database_url.removeprefix("sqlite:///"))


# --- 1. `mnemos backup --out` the database itself -------------------------------------------


def test_backup_onto_the_database_itself_is_refused(world: World, database_url: str) -> None:
    path = _sqlite_file(database_url)
    world.user("Ann", "acme")
    before = path.stat().st_ino
    done = _mnemos(database_url, "backup", "--out", str(path))
    assert path.stat().st_ino == before, "the live database file was replaced"
    assert done.returncode != 0
    assert json.loads(done.stderr)["error"]["code"] == "backup_failed"


# --- 2. `mnemos import --merge` grafts rows onto the target's own principals -----------------


def test_merge_refuses_a_key_for_a_person_the_file_does_not_bring(
    store: Store, world: World, database_url: str
) -> None:
    victim = world.user("Victim", "acme")
    planted = "mn_user_" + "p" * 43
    header = {"format": "mnemos-export", "version": 1, "mnemos": "0.1.0"}
    row = {
        "key_hash": hash_key(planted),
        "kind": "user",
        "principal_id": victim.id,
        "inserted_at": utcnow().isoformat(),
        "revoked_at": None,
    }
    lines = [
        orjson.dumps(header) + b"\n",
        orjson.dumps({"t": "api_keys", "r": row}) + b"\n",
        orjson.dumps({"end": True, "rows": {"api_keys": 1}}) + b"\n",
    ]
    try:
        import_database(database_url, lines, merge=True)
    except TransferError:
        pass
    assert store.user_by_key(hash_key(planted)) is None, "a planted key signs in as the victim"


# --- 3. Tuya: a trailing newline passes the device id and memory key checks ------------------


def test_a_memory_key_with_a_trailing_newline_is_refused(
    client: TestClient,
    project: dict[str, Any],  # noqa: F811
) -> None:
    tuya = Tuya(client, project)
    written = tuya.write("dev1", [entry("k\n", "v")])
    assert written["success"] is False and written["code"] == 1109, written


def test_a_device_id_with_a_trailing_newline_is_refused(
    client: TestClient,
    project: dict[str, Any],  # noqa: F811
) -> None:
    tuya = Tuya(client, project)
    body = json.dumps({"bind_role_type": 2, "memory_list": [entry("k", "v")]}).encode()
    # Signed for .../dev1/memories, sent to .../dev1%0A/memories.
    headers = signed(
        project, "POST", f"{DEVICES}/dev1/memories", None, body, tuya.token, uuid.uuid4().hex
    )
    answer = client.post(
        f"{DEVICES}/dev1%0A/memories",
        content=body,
        headers={**headers, "content-type": "application/json"},
    ).json()
    assert answer["success"] is False, answer


@pytest.mark.parametrize("kind", [2.5, "２", True])
def test_bind_role_type_is_exactly_0_1_or_2(
    client: TestClient,
    project: dict[str, Any],  # noqa: F811
    kind: Any,
) -> None:
    tuya = Tuya(client, project)
    body = {"bind_role_type": kind, "role_id": "no-such-role", "memory_list": [entry("k", "v")]}
    answer = tuya.call("POST", "dev1", {}, body)
    assert answer["success"] is False and "bind_role_type" in answer["msg"], answer


# --- 4. operator commands: clear errors -----------------------------------------------------


@pytest.mark.parametrize("command", ["export", "export-subject"])
def test_an_out_file_in_a_missing_directory_is_a_json_error(
    world: World, database_url: str, tmp_path: Path, command: str
) -> None:
    person = world.user("Ann", "acme")
    out = str(tmp_path / "missing" / "x.ndjson")
    args = ["export", "--out", out]
    if command == "export-subject":
        args = ["admin", "export-subject", "--user", person.id, "--out", out]
    done = _mnemos(database_url, *args)
    assert done.returncode == 1
    assert "error" in json.loads(done.stderr), done.stderr


def test_bind_tuya_role_refuses_a_role_id_the_api_cannot_name(
    world: World, database_url: str
) -> None:
    owner = world.user("Owner", "acme")
    agent = world.agent(owner)
    done = _mnemos(
        database_url,
        "admin",
        "bind-tuya-role",
        "--org",
        world.org("acme"),
        "--role-id",
        "role\n1",
        "--agent",
        agent.id,
    )
    assert done.returncode != 0, done.stdout


def _doctored_export(
    client: TestClient, world: World, database_url: str, change: dict[str, Any]
) -> list[bytes]:
    """An export of a database holding one organization memory, its memory row changed."""
    agent = world.agent(world.user("Ann", "acme"))
    body = memory_body("likes green tea", scope="organization")
    stored = client.post(AGENT, headers=agent.headers, json=body)
    assert stored.status_code == 201, stored.text
    source = io.BytesIO()
    export_database(database_url, source)
    doctored = []
    for line in source.getvalue().splitlines(keepends=True):
        record = orjson.loads(line)
        if record.get("t") == "memories":
            record["r"].update(change)
            line = orjson.dumps(record) + b"\n"
        doctored.append(line)
    return doctored


def _empty_sqlite(tmp_path: Path) -> str:
    target = f"sqlite:///{tmp_path / 'target.db'}"
    migrate(Settings(database_url=target))
    return target


def test_import_refuses_content_the_api_would_refuse(
    client: TestClient, world: World, database_url: str, tmp_path: Path
) -> None:
    _sqlite_file(database_url)
    doctored = _doctored_export(client, world, database_url, {"content": "green\u0000tea"})
    with pytest.raises(TransferError):
        import_database(_empty_sqlite(tmp_path), doctored)


def test_import_refuses_a_memory_filed_under_another_tenant(
    client: TestClient, world: World, database_url: str, tmp_path: Path
) -> None:
    doctored = _doctored_export(client, world, database_url, {"tenant_id": str(uuid.uuid4())})
    with pytest.raises(TransferError):
        import_database(_empty_sqlite(tmp_path), doctored)


# --- 5. the web page's requests count against the anonymous limit of the address -------------


def test_anonymous_requests_do_not_lock_a_signed_in_person_out_of_the_page(
    settings: Settings, store: Store, world: World
) -> None:
    limited = settings.model_copy(update={"rate_limit_per_minute": 10})
    person = world.user("Ann", "acme")
    with TestClient(create_app(limited, store)) as browser:
        assert ui_sign_in(browser, person.api_key).status_code == 303
        # Anyone else at the same address, with no credential (the session cookie is none
        # either: AccessMiddleware sees the same thing from this client or another).
        for _ in range(10):
            browser.get("/openapi.json")
        assert browser.get("/api/v1/me/profile", headers=person.headers).status_code == 200
        page = browser.get("/ui/")
        assert page.status_code == 200, page.text


def test_every_page_request_of_a_signed_in_person_counts_against_them(
    settings: Settings, store: Store, world: World
) -> None:
    """Pages that do not read the person (the sign-in page, which sends a signed-in browser
    home) count too: the page counts a request with a session cookie, not `signed_in`."""
    limited = settings.model_copy(update={"rate_limit_per_minute": 10})
    person = world.user("Ann", "acme")
    with TestClient(create_app(limited, store)) as browser:
        assert ui_sign_in(browser, person.api_key).status_code == 303
        answers = [browser.get("/ui/signin", follow_redirects=False).status_code for _ in range(12)]
        assert answers[-1] == 429, answers
        # ... against the person, not the address: the person's key is refused too.
        assert browser.get("/api/v1/me/profile", headers=person.headers).status_code == 429


def test_a_cookie_does_not_spare_a_request_no_page_serves_from_the_address_limit(
    settings: Settings, store: Store
) -> None:
    """Only a page that counts its requests is left them by the middleware: a path or method
    no page serves, with any cookie, is counted against the address as without one."""
    limited = settings.model_copy(update={"rate_limit_per_minute": 10})
    with TestClient(create_app(limited, store)) as browser:
        browser.cookies.set("mnemos_session", "anything", path="/ui")
        answers = [browser.get("/ui/no-such-page").status_code for _ in range(11)]
        assert answers[:10] == [404] * 10 and answers[-1] == 429, answers
        answers = [browser.put("/ui/me").status_code for _ in range(2)]
        assert answers == [429, 429], answers


# --- 6. the page shows a count the link wrote -------------------------------------------------


def test_the_erased_notice_shows_no_number_the_link_wrote(client: TestClient, world: World) -> None:
    person = world.user("Ann", "acme")
    assert ui_sign_in(client, person.api_key).status_code == 303
    page = client.get("/ui/me", params={"done": "erased", "n": "424242"})
    assert page.status_code == 200
    assert "424242" not in page.text
