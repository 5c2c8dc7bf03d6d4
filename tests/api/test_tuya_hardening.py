"""Tuya hardening (issue 11): odd auth headers, replays, one active value per key, big devices."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.domain.ids import utcnow, uuid7
from mnemos.domain.models import Scope, Status
from mnemos.domain.queries import Audience, MemoryQuery
from mnemos.domain.tuya import LIST_CAP, TuyaMemories
from mnemos.domain.tuya_auth import TuyaCaller
from mnemos.errors import Conflict
from mnemos.storage.base import Store
from mnemos.storage.postgres import driver_url
from mnemos.storage.schema import memories
from tests.world import World

DEVICES = "/v1.0/cloud/agent/ai/chat/b/devices"


def signed(
    project: dict[str, Any],
    method: str,
    path: str,
    query: dict[str, Any] | None = None,
    body: bytes = b"",
    token: str = "",
    nonce: str = "",
) -> dict[str, str]:
    """Headers signed as Tuya documents it (and as the official connector computes it)."""
    t = str(int(time.time() * 1000))
    url = path + ("?" + "&".join(f"{k}={v}" for k, v in sorted(query.items())) if query else "")
    to_sign = f"{method}\n{hashlib.sha256(body).hexdigest()}\n\n{url}"
    message = project["client_id"] + token + t + nonce + to_sign
    sign = hmac.new(project["secret"].encode(), message.encode(), hashlib.sha256).hexdigest()
    headers = {"client_id": project["client_id"], "t": t, "sign": sign.upper()}
    return {**headers, "access_token": token, **({"nonce": nonce} if nonce else {})}


@pytest.fixture
def project(store: Store, world: World) -> dict[str, Any]:
    org = world.org("tuya-hardening")
    client_id, secret = f"c{uuid.uuid4().hex[:12]}", uuid.uuid4().hex
    store.create_tuya_project(client_id, secret, uuid.UUID(org))
    return {"client_id": client_id, "secret": secret, "org": uuid.UUID(org)}


class Tuya:
    """A signed Tuya client over the test app; every request gets a fresh nonce."""

    def __init__(self, client: TestClient, project: dict[str, Any]):
        self.client, self.project = client, project
        query = {"grant_type": 1}
        got = client.get(
            "/v1.0/token", params=query, headers=self.sign("GET", "/v1.0/token", query)
        ).json()
        self.token: str = got["result"]["access_token"]

    def sign(
        self, method: str, path: str, query: dict[str, Any] | None = None, body: bytes = b""
    ) -> dict[str, str]:
        token = getattr(self, "token", "")
        return signed(self.project, method, path, query, body, token, uuid.uuid4().hex)

    def call(
        self, method: str, device: str, query: dict[str, Any], body: Any = None
    ) -> dict[str, Any]:
        path = f"{DEVICES}/{device}/memories"
        raw = json.dumps(body).encode() if body is not None else b""
        response = self.client.request(
            method,
            path,
            params=query,
            content=raw or None,
            headers={**self.sign(method, path, query, raw), "content-type": "application/json"},
        )
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    def write(self, device: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
        return self.call("POST", device, {}, {"bind_role_type": 2, "memory_list": entries})


def entry(key: str, value: str, scope: Any = 1) -> dict[str, Any]:
    return {"memory_key": key, "memory_name": key, "memory_value": value, "effective_scope": scope}


def active_values(database_url: str, key: str) -> list[str]:
    engine = sa.create_engine(driver_url(database_url))
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(memories.c.content, memories.c.metadata).where(
                memories.c.status == Status.ACTIVE.value
            )
        ).all()
    engine.dispose()
    return [content for content, meta in rows if (meta.get("tuya") or {}).get("memory_key") == key]


# --- finding 7: no 500 before authentication ------------------------------------------------


def test_odd_auth_headers_answer_the_tuya_envelope(
    client: TestClient, project: dict[str, Any]
) -> None:
    ok = signed(project, "GET", "/v1.0/token", {"grant_type": 1})
    odd: list[tuple[dict[str, Any], int]] = [
        ({**ok, "t": "1" * 5000}, 1109),  # int() refuses more than 4,300 digits
        ({**ok, "t": b"\xb2\xb3"}, 1109),  # latin-1 superscript digits: isdigit(), not int()
        ({**ok, "sign": b"\xe9" * 64}, 1004),  # compare_digest refuses non-ASCII text
        ({**ok, "client_id": b"\xe9t\xe9"}, 1005),
        ({**ok, "nonce": b"\xff\x01"}, 1004),  # signed, so it changes the signature
    ]
    for headers, code in odd:
        response = client.get("/v1.0/token", params={"grant_type": 1}, headers=headers)
        assert response.status_code == 200, headers
        assert response.json()["code"] == code, headers
    response = client.get(
        "/v1.0/token", params={"grant_type": 1}, headers={**ok, "sign_method": b"\xff"}
    )
    assert response.json()["success"] is True  # not signed, not used
    nested = b"[" * 100_000 + b"]" * 100_000
    for body_bytes in (nested, b'{"a":' * 50_000 + b"1" + b"}" * 50_000):
        response = client.post(
            f"{DEVICES}/dev1/memories",
            content=body_bytes,
            headers={**ok, "access_token": "a" * 32, "sign": "0" * 64},
        )
        assert response.status_code == 200
        assert response.json()["code"] == 1004  # the made-up signature, not a crash


def test_deeply_nested_body_with_a_valid_signature_is_1109(
    client: TestClient, project: dict[str, Any]
) -> None:
    tuya = Tuya(client, project)
    path = f"{DEVICES}/dev1/memories"
    nested = b"[" * 100_000 + b"]" * 100_000
    response = client.post(path, content=nested, headers=tuya.sign("POST", path, None, nested))
    assert response.status_code == 200 and response.json()["code"] == 1109


def test_odd_access_token_and_role_id(client: TestClient, project: dict[str, Any]) -> None:
    tuya = Tuya(client, project)
    path = f"{DEVICES}/dev1/memory/switch"
    headers = {**tuya.sign("GET", path), "access_token": b"\xe9\x00"}
    assert client.get(path, headers=headers).json()["code"] == 1011
    answer = tuya.call("GET", "dev1", {"bind_role_type": 1, "role_id": "a\x00b"})
    assert answer["code"] == 1109


# --- finding 9: replays ---------------------------------------------------------------------


def test_a_signed_request_is_accepted_once(client: TestClient, project: dict[str, Any]) -> None:
    grant = signed(project, "GET", "/v1.0/token", {"grant_type": 1})
    first = client.get("/v1.0/token", params={"grant_type": 1}, headers=grant).json()
    assert first["success"] is True
    again = client.get("/v1.0/token", params={"grant_type": 1}, headers=grant).json()
    assert (again["success"], again["code"]) == (False, 1004)  # no second token from a copy
    token = first["result"]["access_token"]
    path = f"{DEVICES}/dev1/memory/switch"
    request = signed(project, "GET", path, token=token, nonce="n-1")
    assert client.get(path, headers=request).json()["success"] is True
    assert client.get(path, headers=request).json()["code"] == 1004
    other_nonce = signed(project, "GET", path, token=token, nonce="n-2")
    assert client.get(path, headers=other_nonce).json()["success"] is True
    body = json.dumps({"bind_role_type": 2, "memory_list": [entry("k", "v")]}).encode()
    write = signed(project, "POST", f"{DEVICES}/dev1/memories", None, body, token, "n-3")
    for expected in (True, False):
        answer = client.post(f"{DEVICES}/dev1/memories", content=body, headers=write).json()
        assert answer["success"] is expected


def test_seen_signatures_expire(store: Store) -> None:
    past, soon = utcnow() - timedelta(seconds=1), utcnow() + timedelta(minutes=5)
    assert store.remember_tuya_signature("a" * 64, past) is True
    assert store.remember_tuya_signature("b" * 64, soon) is True
    assert store.remember_tuya_signature("b" * 64, soon) is False
    assert store.remember_tuya_signature("a" * 64, soon) is True  # the expired entry was dropped


def test_a_project_granting_in_a_loop_holds_a_bounded_number_of_pairs(
    client: TestClient, project: dict[str, Any], database_url: str
) -> None:
    """Each grant adds a pair that lives 30 days; past `MAX_LIVE_PAIRS` the oldest pairs end,
    so a project granting in a loop cannot grow the table without bound."""
    from mnemos.domain.tuya_auth import MAX_LIVE_PAIRS

    def grant() -> dict[str, Any]:
        headers = signed(project, "GET", "/v1.0/token", {"grant_type": 1}, nonce=uuid.uuid4().hex)
        answer = client.get("/v1.0/token", params={"grant_type": 1}, headers=headers).json()
        assert answer["success"] is True, answer
        result: dict[str, Any] = answer["result"]
        return result

    def usable(token: str) -> bool:
        path = f"{DEVICES}/dev1/memory/switch"
        headers = signed(project, "GET", path, token=token, nonce=uuid.uuid4().hex)
        return bool(client.get(path, headers=headers).json()["success"])

    first = grant()
    pairs = [grant() for _ in range(MAX_LIVE_PAIRS)]
    engine = sa.create_engine(driver_url(database_url))
    try:
        with engine.connect() as conn:
            held = conn.execute(
                sa.text("SELECT count(*) FROM tuya_tokens WHERE client_id = :c"),
                {"c": project["client_id"]},
            ).scalar_one()
    finally:
        engine.dispose()
    assert held == 2 * MAX_LIVE_PAIRS
    assert not usable(first["access_token"])  # the oldest pair ended
    assert usable(pairs[0]["access_token"]) and usable(pairs[-1]["access_token"])
    refreshed = client.get(
        f"/v1.0/token/{first['refresh_token']}",
        headers=signed(
            project, "GET", f"/v1.0/token/{first['refresh_token']}", nonce=uuid.uuid4().hex
        ),
    ).json()
    assert (refreshed["success"], refreshed["code"]) == (False, 1011)  # token invalid


# --- finding 10: one active value per key ----------------------------------------------------


def test_effective_scope_is_exactly_1_or_3_and_keys_are_written_once(
    client: TestClient, project: dict[str, Any], database_url: str
) -> None:
    tuya = Tuya(client, project)
    assert tuya.write("dev1", [entry("sys.age", "1")])["success"] is True
    for scope in (True, 1.0, "1", None):
        answer = tuya.write("dev1", [entry("sys.age", "2", scope)])
        assert (answer["success"], answer["code"]) == (False, 1109), scope
    twice = [entry("sys.age", "3"), entry("sys.age", "4")]
    assert tuya.write("dev1", twice)["code"] == 1109
    assert tuya.write("dev1", [entry("sys.age", "5")])["success"] is True
    assert active_values(database_url, "sys.age") == ["5"]
    listed = tuya.call("GET", "dev1", {"bind_role_type": 2})["result"]
    assert [(m["memory_key"], m["memory_value"]) for m in listed[0]["memory_list"]] == [
        ("sys.age", "5")
    ]


def test_the_database_refuses_a_second_active_value(
    store: Store, project: dict[str, Any], database_url: str
) -> None:
    _, subject = store.claim_tuya_device("dev1", project["org"])
    tuya = TuyaMemories(store)
    caller = TuyaCaller(project["client_id"], project["org"])
    binding = tuya.binding(caller, 2, None)
    tuya.write(caller, "dev1", binding, tuya.parse_entries(binding, [entry("sys.age", "1")]))
    (row,) = active_values(database_url, "sys.age")
    engine = sa.create_engine(driver_url(database_url))
    with engine.connect() as conn:
        copy = conn.execute(
            sa.select(memories).where(memories.c.status == Status.ACTIVE.value)
        ).one()
        values = {**copy._asdict(), "id": uuid7()}
        del values["pk"]
        with pytest.raises(sa.exc.IntegrityError):
            conn.execute(memories.insert().values(**values))
    engine.dispose()
    assert subject == copy.subject_id and row == "1"


def test_concurrent_writers_of_one_key_leave_one_active_value(
    store: Store, project: dict[str, Any], database_url: str
) -> None:
    tuya = TuyaMemories(store)
    caller = TuyaCaller(project["client_id"], project["org"])
    binding = tuya.binding(caller, 2, None)
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def writer(n: int) -> None:
        start.wait()
        try:
            for round_ in range(5):
                entries = tuya.parse_entries(binding, [entry("sys.age", f"{n}-{round_}")])
                tuya.write(caller, "dev1", binding, entries)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(active_values(database_url, "sys.age")) == 1


def test_restoring_an_old_value_of_a_rewritten_key_is_a_conflict(
    store: Store, project: dict[str, Any]
) -> None:
    tuya = TuyaMemories(store)
    caller = TuyaCaller(project["client_id"], project["org"])
    binding = tuya.binding(caller, 2, None)
    tuya.write(caller, "dev1", binding, tuya.parse_entries(binding, [entry("k", "old")]))
    _, subject = store.claim_tuya_device("dev1", project["org"])
    (old,) = store.list_memories(tuya_query(caller, subject), limit=10)
    store.set_memory_status(old.tenant_id, old.id, Status.ARCHIVED, utcnow())
    tuya.write(caller, "dev1", binding, tuya.parse_entries(binding, [entry("k", "new")]))
    with pytest.raises(Conflict):
        store.set_memory_status(old.tenant_id, old.id, Status.ACTIVE, utcnow())


def tuya_query(caller: TuyaCaller, subject: uuid.UUID) -> MemoryQuery:
    """Every version of a device's global memories."""
    audience = Audience(
        organization_id=caller.organization_id,
        scopes=(Scope.SUBJECT,),
        subject_id=subject,
        tenant_id=caller.organization_id,
    )
    return MemoryQuery(audiences=(audience,), statuses=tuple(Status))


# --- finding 6: devices past the list cap ---------------------------------------------------


def test_clear_all_removes_every_key_past_the_list_cap(
    client: TestClient, project: dict[str, Any], store: Store
) -> None:
    tuya = Tuya(client, project)
    assert tuya.write("dev1", [entry("first", "x")])["success"] is True
    _, subject = store.claim_tuya_device("dev1", project["org"])
    caller = TuyaCaller(project["client_id"], project["org"])
    (template,) = store.list_memories(tuya_query(caller, subject), limit=10)
    now = utcnow()
    bulk = []
    for n in range(LIST_CAP + 49):  # with "first": 50 past the cap
        key = f"k{n}"
        meta = {"tuya": {**template.metadata["tuya"], "memory_key": key, "slot": f"1:{key}"}}
        bulk.append((dataclasses.replace(template, id=uuid7(), metadata=meta), f"1:{key}"))
    store.put_tuya_memories(bulk, now)
    assert store.count_memories(tuya_query(caller, subject)) == LIST_CAP + 50
    listed = tuya.call("GET", "dev1", {"bind_role_type": 2})
    assert (listed["success"], listed["code"]) == (False, 1101)  # said, not silently cut
    cleared = tuya.call("DELETE", "dev1", {"bind_role_type": 2, "clear_all_memory": "true"})
    assert cleared["success"] is True
    assert store.count_memories(tuya_query(caller, subject)) == 0
    assert tuya.call("GET", "dev1", {"bind_role_type": 2})["result"] == []


def test_a_memory_name_that_is_not_a_string_is_refused_as_such(
    client: TestClient, project: dict[str, Any]
) -> None:
    answer = Tuya(client, project).write("dev1", [{**entry("k", "v"), "memory_name": 5}])
    assert (answer["success"], answer["code"]) == (False, 1109)
    assert "must be a string" in answer["msg"]
