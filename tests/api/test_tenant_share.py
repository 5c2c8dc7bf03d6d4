"""A tenant's share of a process's requests at once (`MNEMOS_MAX_IN_FLIGHT_PER_TENANT`): the
refusal's shape on every API family, and that every ending gives the slot back. The share
taken by real slow requests over real sockets is `tests/live/test_tenant_share.py`."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.ratelimit import TenantShares
from mnemos.storage.base import Store
from tests.api.asgi_calls import SlowUpload, finish, start_slow_uploads
from tests.api.test_band_agent import BASE, error
from tests.api.test_mcp import HEADERS, initialize
from tests.api.test_rate_limits import ME, SUPERAGENT
from tests.api.test_ui_http import signed_in
from tests.api.tuya_calls import DEVICE, TuyaProject
from tests.world import Actor, World, memory_body

SHARE = 2
EXPORT = "/api/v1/me/memories/export"


@pytest.fixture
def app(settings: Settings, store: Store) -> FastAPI:
    return create_app(settings.model_copy(update={"max_in_flight_per_tenant": SHARE}), store)


def shares(app: FastAPI) -> TenantShares:
    found: TenantShares = app.state.limiters.shares
    return found


def tenant(actor: Actor) -> str:
    return f"tenant:{actor.tenant}"


@pytest.fixture
def busy(app: FastAPI) -> Iterator[list[str]]:
    """Tenants whose share the test holds (as slow requests of theirs would), given back after."""
    held: list[str] = []
    yield held
    for key in held:
        for _ in range(SHARE):
            shares(app).give_back(key)


def hold_share(app: FastAPI, busy: list[str], key: str) -> None:
    for _ in range(SHARE):
        assert shares(app).take(key)
    busy.append(key)


def test_a_tenant_holding_its_share_is_refused_on_every_api_family(
    app: FastAPI, store: Store, world: World, busy: list[str]
) -> None:
    ann = world.user("Ann", "share-a")
    agent = world.agent(ann)
    other = world.agent(world.user("Bob", "share-b"))
    with TestClient(app) as client:
        project = TuyaProject(client, "share-client", "s" * 32)
        store.create_tuya_project(project.client_id, project.secret, ann.tenant)
        project.connect()  # a token grant is its signature check alone: it takes no slot
        hold_share(app, busy, tenant(ann))
        for path, headers in [
            (BASE, agent.headers),  # Band, agent
            (ME.replace("/profile", "/memories"), ann.headers),  # Band, person
            (SUPERAGENT.format(agent.id), {"api_key": ann.api_key}),  # Superagent
        ]:
            refused = error(client.get(path, headers=headers), 429, "tenant_busy")
            assert "in flight" in refused["message"]
        mcp = client.post("/mcp", json=initialize(), headers={**HEADERS, **agent.headers})
        error(mcp, 429, "tenant_busy")
        assert mcp.headers["retry-after"] == "1"
        rest = client.get(BASE, headers=agent.headers)
        assert rest.headers["retry-after"] == "1"
        tuya = project.get(f"{DEVICE}/dev-1/memories", bind_role_type=2)
        assert (tuya["success"], tuya["code"]) == (False, 1110)
        assert "in flight" in tuya["msg"]
        # Another tenant is served, and the refusals took no slot.
        assert client.get(BASE, headers=other.headers).status_code == 200
        assert shares(app).held(tenant(ann)) == SHARE
        assert shares(app).held(tenant(other)) == 0


def test_the_web_page_refuses_with_a_page(app: FastAPI, world: World, busy: list[str]) -> None:
    ann = world.user("Ann", "share-ui")
    with TestClient(app) as client:
        signed_in(client, ann)
        hold_share(app, busy, tenant(ann))
        page = client.get("/ui/agents")
        assert page.status_code == 429
        assert "text/html" in page.headers["content-type"]
        assert "in flight" in page.text


def test_anonymous_requests_share_their_address(app: FastAPI, busy: list[str]) -> None:
    with TestClient(app) as client:
        assert client.get("/openapi.json").status_code == 200
        hold_share(app, busy, "ip:testclient")  # the test client's address
        refused = error(client.get("/openapi.json"), 429, "tenant_busy")
        assert "address" in refused["message"]
        # A page with a cookie but no signed-in session is counted by the page, at the address.
        client.cookies.set("mnemos_session", "not-a-session")
        page = client.get("/ui/agents")
        assert page.status_code == 429 and "address" in page.text
        client.cookies.clear()
        assert client.get("/healthz").status_code == 200  # health checks are never refused
    with TestClient(app, client=("10.0.0.9", 1)) as elsewhere:
        assert elsewhere.get("/openapi.json").status_code == 200


def answered(client: TestClient, method: str, path: str, **kwargs: Any) -> int:
    return client.request(method, path, **kwargs).status_code


def test_every_ending_gives_the_slot_back(
    app: FastAPI, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request answered, refused by the domain, refused by validation, streamed, or failed
    unexpectedly holds no slot after it (streams cut short: the live test)."""
    ann = world.user("Ann", "share-end")
    agent = world.agent(ann)
    with TestClient(app, raise_server_exceptions=False) as client:
        body = memory_body("about Ann", scope="subject", subject_id=ann.id)
        codes = [answered(client, "POST", BASE, json=body, headers=agent.headers)]
        codes.append(answered(client, "GET", f"{BASE}/{uuid.uuid4()}", headers=agent.headers))
        codes.append(answered(client, "POST", BASE, json={"memory": {}}, headers=agent.headers))
        export = client.get(EXPORT, headers=ann.headers)
        assert len(export.text.splitlines()) == 1
        codes.append(export.status_code)
        monkeypatch.setattr(app.state.services.store, "list_memories", _boom)
        codes.append(answered(client, "GET", BASE, headers=agent.headers))  # 500
    assert codes == [201, 404, 422, 200, 500]
    assert shares(app).held(tenant(ann)) == 0


def _boom(*_args: Any, **_kwargs: Any) -> Any:
    raise RuntimeError("an unexpected failure")


def test_refusals_are_counted_without_tenant_ids(
    settings: Settings, store: Store, world: World
) -> None:
    from prometheus_client import REGISTRY

    app = create_app(
        settings.model_copy(update={"max_in_flight_per_tenant": SHARE, "metrics": True}), store
    )
    agent = world.agent(world.user("Ann", "share-metrics"))
    route = {"route": BASE}
    before = REGISTRY.get_sample_value("mnemos_tenant_share_refusals_total", route) or 0
    with TestClient(app) as client:
        for _ in range(SHARE):
            assert shares(app).take(tenant(agent))
        try:
            error(client.get(BASE, headers=agent.headers), 429, "tenant_busy")
            exposed = client.get("/metrics").text
        finally:
            for _ in range(SHARE):
                shares(app).give_back(tenant(agent))
    assert REGISTRY.get_sample_value("mnemos_tenant_share_refusals_total", route) == before + 1
    assert str(agent.tenant) not in exposed


def test_a_share_of_zero_turns_it_off(settings: Settings, store: Store, world: World) -> None:
    app = create_app(settings.model_copy(update={"max_in_flight_per_tenant": 0}), store)
    agent = world.agent(world.user("Ann", "share-off"))
    with TestClient(app) as client:
        assert app.state.limiters.shares is None
        assert client.get(BASE, headers=agent.headers).status_code == 200


def test_slow_uploads_count_against_their_address_whatever_their_credential(
    app: FastAPI, world: World
) -> None:
    """A request's caller is known only once its body is in (authentication reads it after),
    so while the body arrives the request holds a slot of its address (review12): a client
    trickling uploads, with a real key or a made-up one, cannot hold more than the address's
    share of the process's requests at once."""
    ann = world.agent(world.user("Ann", "share-upload-a"))
    bob = world.agent(world.user("Bob", "share-upload-b"))
    with TestClient(app) as client:
        for credential, address in [
            (ann.headers, "10.9.9.9"),
            ({"X-API-Key": "made-up"}, "10.7.7.7"),
        ]:
            uploads = [SlowUpload(app, BASE, credential, address) for _ in range(SHARE)]
            start_slow_uploads(client, uploads)
            try:
                assert shares(app).held(f"upload:{address}") == SHARE
                assert shares(app).held(tenant(ann)) == 0
                # The address's next request is refused, whoever it is for.
                third = SlowUpload(app, BASE, bob.headers, address)
                assert client.portal is not None
                client.portal.call(third.release.set)
                client.portal.call(third.run)
                assert third.status == 429
                # Ann from another address is served (her tenant holds no slot yet).
                assert client.get(BASE, headers=ann.headers).status_code == 200
            finally:
                statuses = finish(client, uploads)
            assert statuses == [201] * SHARE if credential is ann.headers else [401] * SHARE
            assert shares(app).held(f"upload:{address}") == 0
            assert shares(app).held(tenant(ann)) == 0


def test_once_its_body_is_in_a_request_holds_its_tenants_slot_not_its_addresss(
    app: FastAPI, store: Store, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    ann = world.user("Ann", "share-moved")
    agent = world.agent(ann)
    held: list[tuple[int, int]] = []
    listed = store.list_memories

    def list_memories(*args: Any, **kwargs: Any) -> Any:
        held.append((shares(app).held("ip:testclient"), shares(app).held(tenant(ann))))
        return listed(*args, **kwargs)

    monkeypatch.setattr(store, "list_memories", list_memories)
    with TestClient(app) as client:
        assert client.get(BASE, headers=agent.headers).status_code == 200
    assert held == [(0, 1)]


def test_a_tuya_request_refused_for_its_address_is_in_tuyas_envelope(
    app: FastAPI, store: Store, world: World, busy: list[str]
) -> None:
    ann = world.user("Ann", "share-tuya-address")
    with TestClient(app) as client:
        project = TuyaProject(client, "share-address", "a" * 32)
        store.create_tuya_project(project.client_id, project.secret, ann.tenant)
        project.connect()
        hold_share(app, busy, "upload:testclient")
        tuya = project.get(f"{DEVICE}/dev-1/memories", bind_role_type=2)
        assert (tuya["success"], tuya["code"]) == (False, 1110)
        assert "address" in tuya["msg"]
