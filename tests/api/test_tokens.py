"""People's bearer tokens: Mnemos-issued and from an external identity provider (JWKS)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain.accounts import JWT_SECRET_NAME, issue_token
from mnemos.storage.base import Store
from tests.api.identity import AUDIENCE, ISSUER, bearer, serving, write_jwks
from tests.api.test_band_agent import error
from tests.world import World

ME = "/api/v1/me/profile"


def test_mnemos_issued_tokens(client: TestClient, world: World, store: Store) -> None:
    ann = world.user("Ann", "acme")
    token = issue_token(store, uuid.UUID(ann.id), 60)
    assert client.get(ME, headers=bearer(token)).json()["data"]["id"] == ann.id
    secret = store.secret(JWT_SECRET_NAME)
    now = int(time.time())
    good = {"sub": ann.id, "iss": "mnemos", "aud": "mnemos", "iat": now, "exp": now + 60}
    forged = {
        "expired": jwt.encode({**good, "exp": now - 10}, secret, algorithm="HS256"),
        "wrong audience": jwt.encode({**good, "aud": "other"}, secret, algorithm="HS256"),
        "wrong secret": jwt.encode(good, b"x" * 32, algorithm="HS256"),
        "alg none": jwt.encode(good, None, algorithm="none"),
        "no exp": jwt.encode(
            {k: v for k, v in good.items() if k != "exp"}, secret, algorithm="HS256"
        ),
        "unknown user": jwt.encode({**good, "sub": str(uuid.uuid4())}, secret, algorithm="HS256"),
        "truncated": token[:-5],
    }
    for name, bad in forged.items():
        assert client.get(ME, headers=bearer(bad)).status_code == 401, name
    error(client.get(ME, headers=bearer(forged["alg none"])), 401, "unauthorized")


@pytest.fixture
def idp(tmp_path: Path) -> dict[str, Any]:
    key, path = write_jwks(tmp_path, "k1", alg="RS256")
    return {"key": key, "path": path}


def test_external_identity_provider(
    settings: Settings, store: Store, world: World, idp: dict[str, Any]
) -> None:
    configured = settings.model_copy(
        update={"jwt_issuer": ISSUER, "jwt_audience": AUDIENCE, "jwks_file": idp["path"]}
    )
    ann = world.user("Ann", "acme")
    now = int(time.time())
    claims = {"sub": ann.id, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 60}

    def sign(payload: dict[str, Any], key: Any = idp["key"], alg: str = "RS256") -> str:
        return jwt.encode(payload, key, algorithm=alg, headers={"kid": "k1"})

    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with TestClient(create_app(configured, store)) as client:
        assert client.get(ME, headers=bearer(sign(claims))).json()["data"]["id"] == ann.id
        refused = {
            "expired": sign({**claims, "exp": now - 5}),
            "wrong audience": sign({**claims, "aud": "someone-else"}),
            "wrong signature": sign(claims, other_key),
            "alg none": jwt.encode(claims, None, algorithm="none", headers={"kid": "k1"}),
            "hs256 with the public key as secret": jwt.encode(claims, b"k" * 32, algorithm="HS256"),
            "not a user id": sign({**claims, "sub": "ann@example.test"}),
        }
        for name, token in refused.items():
            response = client.get(ME, headers=bearer(token))
            assert response.status_code == 401, name
            assert response.json()["error"]["code"] == "unauthorized"


def test_configured_secret_signs_and_checks(settings: Settings, store: Store, world: World) -> None:
    ann = world.user("Ann", "acme")
    configured = settings.model_copy(update={"jwt_secret": "s" * 40})
    token = issue_token(store, uuid.UUID(ann.id), 60, configured.jwt_secret)
    with TestClient(create_app(configured, store)) as client:
        assert client.get(ME, headers=bearer(token)).status_code == 200
        database_signed = issue_token(store, uuid.UUID(ann.id), 60)
        assert client.get(ME, headers=bearer(database_signed)).status_code == 401


def test_external_provider_by_jwks_url(
    settings: Settings, store: Store, world: World, idp: dict[str, Any]
) -> None:
    """The keys come from the provider's JWKS endpoint (a local HTTP server here)."""
    ann = world.user("Ann", "acme")
    now = int(time.time())
    claims = {"sub": ann.id, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 60}
    with serving(idp["path"]) as url:
        configured = settings.model_copy(
            update={"jwt_issuer": ISSUER, "jwt_audience": AUDIENCE, "jwks_url": url}
        )
        with TestClient(create_app(configured, store)) as client:
            good = jwt.encode(claims, idp["key"], algorithm="RS256", headers={"kid": "k1"})
            assert client.get(ME, headers=bearer(good)).json()["data"]["id"] == ann.id
            stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            bad = jwt.encode(claims, stranger, algorithm="RS256", headers={"kid": "k1"})
            assert client.get(ME, headers=bearer(bad)).status_code == 401
            unknown_kid = jwt.encode(claims, idp["key"], algorithm="RS256", headers={"kid": "nope"})
            assert client.get(ME, headers=bearer(unknown_kid)).status_code == 401
