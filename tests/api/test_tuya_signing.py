"""Tuya request signing details: clock skew, nonce, signed headers, missing and unknown fields."""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mnemos.storage.base import Store
from tests.world import World

SWITCH = "/v1.0/cloud/agent/ai/chat/b/devices/dev1/memory/switch"


def sign(
    secret: str, client_id: str, token: str, path: str, query: str = "", **extra: str
) -> dict[str, str]:
    """Headers for a GET, computed from Tuya's published algorithm."""
    t = extra.pop("t", str(int(time.time() * 1000)))
    nonce = extra.get("nonce", "")
    signed = extra.pop("signed_headers", "")
    to_sign = (
        f"GET\n{hashlib.sha256(b'').hexdigest()}\n{signed}\n{path}{'?' + query if query else ''}"
    )
    message = client_id + token + t + nonce + to_sign
    signature = hmac.new(secret.encode(), message.encode(), hashlib.sha256).hexdigest().upper()
    return {"client_id": client_id, "access_token": token, "t": t, "sign": signature, **extra}


@pytest.fixture
def project(store: Store, world: World) -> dict[str, Any]:
    org = world.org("tuya-signing")
    client_id, secret = f"c{uuid.uuid4().hex[:12]}", uuid.uuid4().hex
    store.create_tuya_project(client_id, secret, uuid.UUID(org))
    return {"client_id": client_id, "secret": secret}


def token(client: TestClient, project: dict[str, Any], **extra: str) -> dict[str, Any]:
    headers = sign(
        project["secret"], project["client_id"], "", "/v1.0/token", "grant_type=1", **extra
    )
    result: dict[str, Any] = client.get(
        "/v1.0/token", params={"grant_type": 1}, headers=headers
    ).json()
    return result


def test_signing_rules(client: TestClient, project: dict[str, Any]) -> None:
    granted = token(client, project, nonce="n-123")
    assert granted["success"] is True, granted  # a nonce is part of the signed message
    access = granted["result"]["access_token"]
    ok = sign(project["secret"], project["client_id"], access, SWITCH)
    assert client.get(SWITCH, headers=ok).json()["success"] is True
    with_headers = sign(
        project["secret"],
        project["client_id"],
        access,
        SWITCH,
        **{"Signature-Headers": "area_id", "area_id": "29", "signed_headers": "area_id:29\n"},
    )
    assert client.get(SWITCH, headers=with_headers).json()["success"] is True
    tampered = {**with_headers, "area_id": "30"}  # a signed header changed in transit
    assert client.get(SWITCH, headers=tampered).json()["code"] == 1004
    stale = sign(
        project["secret"],
        project["client_id"],
        access,
        SWITCH,
        t=str(int(time.time() * 1000) - 10 * 60_000),
    )
    assert client.get(SWITCH, headers=stale).json()["code"] == 1013
    unknown = sign(project["secret"], "nobody", access, SWITCH)
    assert client.get(SWITCH, headers=unknown).json()["code"] == 1005
    for missing in ("client_id", "sign", "access_token"):
        headers = {k: v for k, v in ok.items() if k != missing}
        assert client.get(SWITCH, headers=headers).json()["code"] == 1100, missing
    assert client.get(SWITCH, headers={**ok, "t": "soon"}).json()["code"] == 1109
    assert token(client, {**project, "secret": "wrong"})["code"] == 1004
    missing_grant = sign(project["secret"], project["client_id"], "", "/v1.0/token")
    assert client.get("/v1.0/token", headers=missing_grant).json()["code"] == 1100
    for response in (client.get(SWITCH), client.get("/v1.0/token")):
        assert response.status_code == 200 and response.json()["success"] is False
