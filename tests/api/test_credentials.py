"""Rotating keys, revoking tokens and the cap on agents per person, over the API."""

from __future__ import annotations

import base64
import json
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain.accounts import issue_token
from mnemos.storage.base import Store
from tests.api.identity import AUDIENCE, ISSUER, bearer, serving, write_jwks
from tests.api.test_band_agent import BASE, error, listed, store
from tests.world import World

ME = "/api/v1/me"


def test_a_person_rotates_their_key(client: TestClient, world: World) -> None:
    ann = world.user("Ann", "acme")
    answer = client.post(f"{ME}/api-key/rotate", headers=ann.headers)
    assert answer.status_code == 200, answer.text
    new_key = answer.json()["data"]["api_key"]
    assert new_key.startswith("mn_user_") and new_key != ann.api_key
    error(client.get(f"{ME}/profile", headers=ann.headers), 401, "unauthorized")
    assert (
        client.get(f"{ME}/profile", headers={"X-API-Key": new_key}).json()["data"]["id"] == ann.id
    )


def test_a_person_rotates_their_agents_keys(client: TestClient, world: World) -> None:
    ann, bob = world.user("Ann", "acme"), world.user("Bob", "acme")
    bot = world.agent(ann)
    store(client, bot, "kept across rotation", scope="agent")
    path = f"{ME}/agents/{bot.id}/api-key/rotate"
    error(client.post(path, headers=bob.headers), 404, "not_found")  # not Bob's agent
    error(client.post(f"{ME}/agents/nope/api-key/rotate", headers=ann.headers), 404, "not_found")
    error(client.post(path, headers=bot.headers), 401, "unauthorized")  # agents cannot
    answer = client.post(path, headers=ann.headers)
    assert answer.status_code == 200, answer.text
    new_key = answer.json()["data"]["api_key"]
    assert new_key.startswith("mn_agent_")
    error(client.get(BASE, headers=bot.headers), 401, "unauthorized")
    bot.api_key = new_key
    assert listed(client, bot) == ["kept across rotation"]


def test_a_person_revokes_their_tokens(client: TestClient, world: World, store: Store) -> None:
    ann = world.user("Ann", "acme")
    before = issue_token(store, uuid.UUID(ann.id), 600)
    assert client.get(f"{ME}/profile", headers=bearer(before)).status_code == 200
    answer = client.post(f"{ME}/tokens/revoke", headers=bearer(before))
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"]["tokens_valid_after"]
    after = issue_token(store, uuid.UUID(ann.id), 600)  # most likely within the same second
    error(client.get(f"{ME}/profile", headers=bearer(before)), 401, "unauthorized")
    assert client.get(f"{ME}/profile", headers=bearer(after)).status_code == 200
    assert client.get(f"{ME}/profile", headers=ann.headers).status_code == 200  # key unaffected
    other = world.user("Bob", "acme")
    bobs = issue_token(store, uuid.UUID(other.id), 600)
    assert client.get(f"{ME}/profile", headers=bearer(bobs)).status_code == 200


def test_revocation_refuses_a_token_of_the_same_second(
    client: TestClient, world: World, store: Store
) -> None:
    """A token whose `iat` has whole seconds, issued in the revocation's second, is refused."""
    ann = world.user("Ann", "acme")
    revoked = client.post(f"{ME}/tokens/revoke", headers=ann.headers).json()["data"]
    second = int(datetime.fromisoformat(revoked["tokens_valid_after"]).timestamp())
    secret = store.secret("jwt-hs256")
    claims = {"sub": ann.id, "iss": "mnemos", "aud": "mnemos", "exp": second + 60}
    same_second = jwt.encode({**claims, "iat": second}, secret, algorithm="HS256")
    no_iat = jwt.encode(claims, secret, algorithm="HS256")
    error(client.get(f"{ME}/profile", headers=bearer(same_second)), 401, "unauthorized")
    error(client.get(f"{ME}/profile", headers=bearer(no_iat)), 401, "unauthorized")


def register(client: TestClient, headers: dict[str, str], name: str) -> Any:
    return client.post(f"{ME}/agents/register", json={"agent": {"name": name}}, headers=headers)


def test_agents_per_person_are_capped(settings: Settings, store: Store, world: World) -> None:
    ann = world.user("Ann", "acme")
    capped = settings.model_copy(update={"max_agents_per_user": 2})
    with TestClient(create_app(capped, store)) as client:
        first = register(client, ann.headers, "one")
        assert [first.status_code, register(client, ann.headers, "two").status_code] == [201, 201]
        body = error(register(client, ann.headers, "three"), 409, "agent_limit_reached")
        assert body["details"] == {"max_agents": 2}
        assert len(store.agents_of(uuid.UUID(ann.id))) == 2
        agent_id = first.json()["data"]["agent"]["id"]
        assert client.delete(f"{ME}/agents/{agent_id}", headers=ann.headers).status_code == 200
        assert register(client, ann.headers, "three").status_code == 201


# --- an external identity provider's malformed tokens ---------------------------------------


@pytest.fixture
def idp_file(tmp_path: Path) -> tuple[rsa.RSAPrivateKey, Path]:
    return write_jwks(tmp_path, "rsa1")


def b64(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def malformed(user_id: str) -> dict[str, str]:
    now = int(time.time())
    claims = {"sub": user_id, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 60}
    ec_key = ec.generate_private_key(ec.SECP256R1())

    def es256(headers: dict[str, Any] | None) -> str:
        """Signed by hand: PyJWT refuses to write a kid that is not a string."""
        header = {"alg": "ES256", "typ": "JWT", **(headers or {})}
        signing_input = f"{b64(header)}.{b64(claims)}".encode()
        algorithm = jwt.algorithms.ECAlgorithm(jwt.algorithms.ECAlgorithm.SHA256)
        signature = base64.urlsafe_b64encode(algorithm.sign(signing_input, ec_key)).rstrip(b"=")
        return f"{signing_input.decode()}.{signature.decode()}"

    body = jwt.encode(claims, "x" * 32, algorithm="HS256").split(".")[1]
    return {
        "ES256 naming an RSA kid": es256({"kid": "rsa1"}),
        "ES256 without kid": es256(None),
        "unknown kid": es256({"kid": "nope"}),
        "numeric kid": es256({"kid": 7}),
        "object kid": es256({"kid": {"a": 1}}),
        "garbage base64": f"eyJ!!!.{body}.@@@",
        "header not JSON": f"bm90IGpzb24.{body}.c2ln",
        "HS256 with the issuer": jwt.encode(claims, "x" * 32, algorithm="HS256"),
    }


def test_malformed_external_tokens_are_401(
    settings: Settings, store: Store, world: World, idp_file: tuple[Any, Path]
) -> None:
    key, path = idp_file
    configured = settings.model_copy(
        update={"jwt_issuer": ISSUER, "jwt_audience": AUDIENCE, "jwks_file": path}
    )
    ann = world.user("Ann", "acme")
    with TestClient(create_app(configured, store)) as client:
        now = int(time.time())
        good_claims = {"sub": ann.id, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 60}
        good = jwt.encode(good_claims, key, algorithm="RS256", headers={"kid": "rsa1"})
        assert client.get(f"{ME}/profile", headers=bearer(good)).status_code == 200
        for name, token in malformed(ann.id).items():
            response = client.get(f"{ME}/profile", headers=bearer(token))
            assert response.status_code == 401, (name, response.text)
            assert response.json()["error"]["code"] == "unauthorized", name
        client.post(f"{ME}/tokens/revoke", headers=ann.headers)
        error(client.get(f"{ME}/profile", headers=bearer(good)), 401, "unauthorized")


def test_malformed_tokens_through_a_jwks_url(
    settings: Settings, store: Store, world: World, idp_file: tuple[Any, Path]
) -> None:
    ann = world.user("Ann", "acme")
    with serving(idp_file[1]) as url:
        configured = settings.model_copy(
            update={"jwt_issuer": ISSUER, "jwt_audience": AUDIENCE, "jwks_url": url}
        )
        with TestClient(create_app(configured, store)) as client:
            for name, token in malformed(ann.id).items():
                response = client.get(f"{ME}/profile", headers=bearer(token))
                assert response.status_code == 401, (name, response.text)
