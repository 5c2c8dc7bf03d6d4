"""Signed Tuya calls through an ASGI client (Tuya's published signing algorithm)."""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from fastapi.testclient import TestClient

from mnemos.storage.base import Store

DEVICE = "/v1.0/cloud/agent/ai/chat/b/devices"


@dataclass
class TuyaProject:
    client: TestClient
    client_id: str
    secret: str
    access_token: str = ""

    def _headers(
        self, method: str, path: str, query: str, body: bytes, token: str
    ) -> dict[str, str]:
        t, nonce = str(int(time.time() * 1000)), uuid.uuid4().hex  # a fresh nonce: no replays
        digest = hashlib.sha256(body).hexdigest()
        url = path + ("?" + query if query else "")
        message = f"{self.client_id}{token}{t}{nonce}{method}\n{digest}\n\n{url}"
        sign = hmac.new(self.secret.encode(), message.encode(), hashlib.sha256).hexdigest()
        return {
            "client_id": self.client_id,
            "access_token": token,
            "t": t,
            "nonce": nonce,
            "sign": sign.upper(),
        }

    def connect(self) -> TuyaProject:
        headers = self._headers("GET", "/v1.0/token", "grant_type=1", b"", "")
        granted = self.client.get("/v1.0/token?grant_type=1", headers=headers).json()
        assert granted["success"] is True, granted
        self.access_token = granted["result"]["access_token"]
        return self

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        query = urlencode(sorted(params.items()))
        headers = self._headers("GET", path, query, b"", self.access_token)
        response = self.client.get(path + ("?" + query if query else ""), headers=headers)
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    def post(self, path: str, body: bytes) -> dict[str, Any]:
        headers = self._headers("POST", path, "", body, self.access_token)
        headers["content-type"] = "application/json"
        response = self.client.post(path, content=body, headers=headers)
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer


def tuya_project(client: TestClient, store: Store, organization_id: str) -> TuyaProject:
    client_id, secret = f"c{uuid.uuid4().hex[:12]}", uuid.uuid4().hex
    store.create_tuya_project(client_id, secret, uuid.UUID(organization_id))
    return TuyaProject(client, client_id, secret).connect()
