"""The Band agent memory API through an ASGI client, on every backend."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.world import Actor, World, memory_body

BASE = "/api/v1/agent/memories"


def store(client: TestClient, agent: Actor, content: str = "fact", **fields: Any) -> dict[str, Any]:
    response = client.post(BASE, json=memory_body(content, **fields), headers=agent.headers)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()["data"]
    return created


def listed(client: TestClient, agent: Actor, **params: Any) -> list[str]:
    response = client.get(BASE, params=params, headers=agent.headers)
    assert response.status_code == 200, response.text
    return [row["content"] for row in response.json()["data"]]


def error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()["error"]
    assert body["code"] == code
    assert body["request_id"] == response.headers["x-request-id"]
    return body


@pytest.fixture
def acme(world: World) -> dict[str, Actor]:
    ann = world.user("Ann", "acme")
    bob = world.user("Bob", "acme")
    loner = world.user("Lou")
    return {
        "ann": ann,
        "bob": bob,
        "a1": world.agent(ann, "Reviewer"),
        "a2": world.agent(bob, "Coder"),
        "lone": world.agent(loner, "Solo"),
        "other": world.agent(world.user("Eve", "globex"), "Spy"),
    }


def test_store_returns_the_memory_and_defaults_scope(
    client: TestClient, acme: dict[str, Actor]
) -> None:
    a1 = acme["a1"]
    private = store(client, a1, "private note", metadata={"tags": ["x"]})
    assert private["scope"] == "agent"
    assert private["organization_id"] is None
    assert private["source_agent_id"] == a1.id
    assert private["status"] == "active"
    assert private["metadata"] == {"tags": ["x"]}
    assert private["inserted_at"].endswith("Z") and "." in private["inserted_at"]
    about = store(client, a1, "about bob", subject_id=acme["bob"].id)
    assert about["scope"] == "subject"
    assert about["organization_id"] == a1.organization_id
    fetched = client.get(f"{BASE}/{private['id']}", headers=a1.headers).json()["data"]
    assert fetched == private


@pytest.mark.parametrize(
    ("fields", "code", "detail"),
    [
        ({"scope": "subject"}, "subject_id_required", None),
        (
            {"scope": "agent", "subject_id": str(uuid.uuid4())},
            "subject_id_requires_subject_scope",
            None,
        ),
        ({"system": "sensory", "type": "semantic"}, "invalid_memory_type", "valid_types"),
        ({"system": "cosmic"}, "validation_failed", "memory.system"),
        ({"type": "dream"}, "validation_failed", "memory.type"),
        ({"segment": "x"}, "validation_failed", "memory.segment"),
        ({"scope": "world"}, "validation_failed", "memory.scope"),
        ({"subject_id": "not-a-uuid"}, "validation_failed", "memory.subject_id"),
        ({"content": ""}, "validation_failed", "content"),
        ({"content": "   "}, "validation_failed", "content"),
        ({"content": "x" * 10_001}, "validation_failed", "content"),
        ({"content": 42}, "validation_failed", "memory.content"),
        ({"thought": None}, "validation_failed", "memory.thought"),
        ({"metadata": ["not", "an", "object"]}, "validation_failed", "memory.metadata"),
    ],
)
def test_store_refusals(
    client: TestClient,
    acme: dict[str, Actor],
    fields: dict[str, Any],
    code: str,
    detail: str | None,
) -> None:
    response = client.post(BASE, json=memory_body(**fields), headers=acme["a1"].headers)
    body = error(response, 422, code)
    if detail:
        assert detail in body["details"]
    assert listed(client, acme["a1"], status="all") == []


def test_missing_fields_and_bad_json(client: TestClient, acme: dict[str, Actor]) -> None:
    headers = {**acme["a1"].headers, "content-type": "application/json"}
    body = error(
        client.post(BASE, json={"memory": {"content": "x"}}, headers=headers),
        422,
        "validation_failed",
    )
    assert {"memory.system", "memory.type", "memory.segment", "memory.thought"} <= set(
        body["details"]
    )
    error(client.post(BASE, content=b"{not json", headers=headers), 422, "validation_failed")
    error(client.post(BASE, content=b"[]", headers=headers), 422, "validation_failed")


def test_content_at_the_limit_is_accepted(client: TestClient, acme: dict[str, Actor]) -> None:
    assert len(store(client, acme["a1"], "y" * 10_000)["content"]) == 10_000


def test_org_scope_needs_an_organization(client: TestClient, acme: dict[str, Actor]) -> None:
    lone = acme["lone"]
    error(
        client.post(BASE, json=memory_body(scope="organization"), headers=lone.headers),
        422,
        "org_scope_requires_organization",
    )
    error(
        client.get(BASE, params={"memory_scope": "org"}, headers=lone.headers),
        422,
        "org_scope_requires_organization",
    )
    subject = store(client, lone, "lonely subject", subject_id=acme["ann"].id)
    assert subject["organization_id"] is None


def test_list_table_of_design(client: TestClient, acme: dict[str, Actor]) -> None:
    a1, a2 = acme["a1"], acme["a2"]
    ann, bob = acme["ann"], acme["bob"]
    store(client, a1, "a1 private")
    store(client, a1, "a1 org", scope="organization")
    store(client, a1, "a1 about ann", subject_id=ann.id)
    store(client, a2, "a2 private")
    store(client, a2, "a2 org", scope="organization")
    store(client, a2, "a2 about ann", subject_id=ann.id)
    store(client, a2, "a2 about bob", subject_id=bob.id)
    store(client, acme["other"], "globex org", scope="organization")

    assert listed(client, a1) == ["a1 about ann", "a1 org", "a1 private"]
    assert listed(client, a1, scope="all") == ["a1 about ann", "a1 org", "a1 private"]
    assert listed(client, a1, scope="agent") == ["a1 private"]
    assert listed(client, a1, subject_id=ann.id) == ["a1 about ann"]
    assert listed(client, a1, memory_scope="org") == ["a2 org", "a1 org"]
    assert listed(client, a1, memory_scope="org", scope="organization") == ["a2 org", "a1 org"]
    assert listed(client, a1, memory_scope="org", scope="subject", subject_id=ann.id) == [
        "a2 about ann",
        "a1 about ann",
    ]
    assert listed(client, a1, memory_scope="org", scope="agent") == ["a1 private"]
    assert listed(client, a1, memory_scope="org", scope="all") == [
        "a2 org",
        "a1 about ann",
        "a1 org",
        "a1 private",
    ]
    assert listed(client, a1, memory_scope="org", scope="all", subject_id=bob.id) == [
        "a2 about bob",
        "a2 org",
        "a1 about ann",
        "a1 org",
        "a1 private",
    ]
    error(
        client.get(BASE, params={"memory_scope": "org", "scope": "subject"}, headers=a1.headers),
        422,
        "subject_id_required",
    )
    assert listed(client, acme["other"], memory_scope="org", scope="all") == ["globex org"]


def test_filters_narrow(client: TestClient, acme: dict[str, Actor]) -> None:
    a1 = acme["a1"]
    store(client, a1, "guideline", type="procedural", segment="guideline")
    store(client, a1, "seen", system="sensory", type="iconic", segment="tool")
    store(client, a1, "episode", system="working", type="episodic", segment="agent")
    assert listed(client, a1, segment="guideline") == ["guideline"]
    assert listed(client, a1, system="sensory") == ["seen"]
    assert listed(client, a1, type="episodic") == ["episode"]
    assert listed(client, a1, system="working", segment="tool") == []
    for name in ("system", "type", "segment", "status", "scope", "memory_scope", "subject_id"):
        body = error(
            client.get(BASE, params={name: "bogus"}, headers=a1.headers), 422, "validation_failed"
        )
        assert name in body["details"]


def test_lifecycle(client: TestClient, acme: dict[str, Actor]) -> None:
    a1, a2 = acme["a1"], acme["a2"]
    old = store(client, a1, "old", scope="organization")
    kept = store(client, a1, "kept", scope="organization")
    gone = client.post(f"{BASE}/{old['id']}/supersede", headers=a1.headers)
    assert gone.status_code == 200
    assert gone.json()["data"]["status"] == "superseded"
    assert gone.json()["data"]["updated_at"] >= old["updated_at"]
    archived = client.post(f"{BASE}/{kept['id']}/archive", headers=a1.headers).json()["data"]
    assert archived["status"] == "archived"
    assert listed(client, a1) == []
    assert listed(client, a1, status="superseded") == ["old"]
    assert listed(client, a1, status="archived") == ["kept"]
    assert listed(client, a1, status="all") == ["kept", "old"]
    # another agent of the organization can see it but may not change it
    assert client.get(f"{BASE}/{kept['id']}", headers=a2.headers).status_code == 200
    error(client.post(f"{BASE}/{kept['id']}/supersede", headers=a2.headers), 403, "forbidden")
    error(client.post(f"{BASE}/{kept['id']}/archive", headers=a2.headers), 403, "forbidden")


def test_read_one_hides_what_is_not_visible(client: TestClient, acme: dict[str, Actor]) -> None:
    secret = store(client, acme["a1"], "secret")
    shared = store(client, acme["a1"], "shared", scope="organization")
    for reader in (acme["a2"], acme["other"], acme["lone"]):
        error(client.get(f"{BASE}/{secret['id']}", headers=reader.headers), 404, "not_found")
        error(
            client.post(f"{BASE}/{secret['id']}/archive", headers=reader.headers), 404, "not_found"
        )
    for reader in (acme["other"], acme["lone"]):
        error(client.get(f"{BASE}/{shared['id']}", headers=reader.headers), 404, "not_found")
    for bad in ("nope", "0", str(uuid.uuid4()), "%27%20OR%201=1"):
        error(client.get(f"{BASE}/{bad}", headers=acme["a1"].headers), 404, "not_found")


def test_auth(client: TestClient, acme: dict[str, Actor]) -> None:
    error(client.get(BASE), 401, "unauthorized")
    error(client.get(BASE, headers={"X-API-Key": "mn_agent_forged"}), 401, "unauthorized")
    error(client.get(BASE, headers=acme["ann"].headers), 401, "unauthorized")
    error(client.post(BASE, json=memory_body()), 401, "unauthorized")
    me = client.get("/api/v1/agent/me", headers=acme["a1"].headers).json()["data"]
    assert me["id"] == acme["a1"].id
    assert me["owner_uuid"] == acme["ann"].id


def test_plan_gating(client: TestClient, world: World, acme: dict[str, Actor]) -> None:
    a1 = acme["a1"]
    kept = store(client, a1, "before")
    world.store.set_memory_enabled("organization", uuid.UUID(world.orgs["acme"]), False)
    for response in (
        client.get(BASE, headers=a1.headers),
        client.post(BASE, json=memory_body(), headers=a1.headers),
        client.get(f"{BASE}/{kept['id']}", headers=a1.headers),
        client.post(f"{BASE}/{kept['id']}/archive", headers=a1.headers),
    ):
        body = error(response, 403, "plan_required")
        assert body["message"] == (
            "Memory API access requires an Enterprise plan. "
            "Please upgrade your subscription to use this endpoint."
        )
    assert client.get("/api/v1/agent/me", headers=a1.headers).status_code == 200
    world.store.set_memory_enabled("organization", uuid.UUID(world.orgs["acme"]), True)
    world.store.set_memory_enabled("user", uuid.UUID(acme["ann"].id), False)
    error(client.get(BASE, headers=a1.headers), 403, "plan_required")
    assert client.get(BASE, headers=acme["a2"].headers).status_code == 200


def test_body_over_one_mebibyte_is_413(client: TestClient, acme: dict[str, Actor]) -> None:
    big = memory_body("x" * (1024 * 1024 + 10))
    response = client.post(BASE, json=big, headers=acme["a1"].headers)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert response.json()["error"]["request_id"] == response.headers["x-request-id"]


def test_unknown_route_and_method_use_the_envelope(client: TestClient) -> None:
    error(client.get("/api/v1/agent/nothing"), 404, "not_found")
    error(client.delete(BASE), 405, "method_not_allowed")


def test_a_405_names_the_methods_its_path_serves(client: TestClient) -> None:
    """`Allow` lists every method of the path's own template, from routes that FastAPI's
    included routers hide, and none of a template that only also matches the path."""
    for method, path, allowed in [
        ("DELETE", BASE, "GET, POST"),
        ("PUT", f"{BASE}/{uuid.uuid4()}", "GET"),
        ("PUT", f"/api/v1/me/memories/{uuid.uuid4()}", "DELETE, GET"),
        ("POST", "/api/v1/me/memories/export", "GET"),
        ("DELETE", "/healthz", "GET"),
        ("PUT", "/ui/agents", "GET, HEAD, POST"),
    ]:
        refused = client.request(method, path)
        assert refused.status_code == 405, (method, path)
        assert refused.headers["allow"] == allowed, (method, path)


def test_healthz(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    # With read replicas (MNEMOS_TEST_REPLICA), it also counts them: the test's one is in rotation.
    assert body.pop("replicas", None) in (None, {"configured": 1, "in_rotation": 1})
    assert body == {"status": "ok"}
    assert response.headers["x-request-id"]
