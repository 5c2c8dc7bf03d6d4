"""Values no backend can store or no encoder can send back are refused before anything is stored.

The rules are `mnemos.domain.values`: text without NUL or lone surrogates, and metadata with
bounded depth and size, integers within 64 bits and finite numbers only. Bodies are sent as raw
JSON text, as an attacker would, so the JSON parser's own behaviour is tested too.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mnemos.storage.base import Store
from tests.api.test_band_agent import BASE, error, listed
from tests.api.tuya_calls import DEVICE, tuya_project
from tests.world import Actor, World

JSON_HEADERS = {"content-type": "application/json"}
MEMORY = '"system": "long_term", "type": "semantic", "segment": "user"'


def store_raw(client: TestClient, agent: Actor, memory_fields: str) -> Any:
    """POST a memory whose JSON text ends with `memory_fields` (raw JSON, not Python values)."""
    body = '{"memory": {' + MEMORY + ", " + memory_fields + "}}"
    return client.post(BASE, content=body.encode(), headers={**agent.headers, **JSON_HEADERS})


@pytest.fixture
def acme(world: World) -> dict[str, Actor]:
    ann = world.user("Ann", "acme")
    return {"ann": ann, "a1": world.agent(ann, "Ann Bot")}


DEEP = "[" * 40 + "]" * 40


@pytest.mark.parametrize(
    ("metadata", "path"),
    [
        ('{"big": 18446744073709551616}', "metadata.big"),
        ('{"big": 9223372036854775808}', "metadata.big"),
        ('{"small": -9223372036854775809}', "metadata.small"),
        ('{"list": [1, 2, 99999999999999999999999]}', "metadata.list[2]"),
        ('{"deep": ' + DEEP + "}", "metadata.deep"),
        ('{"deep": ' + "[" * 255 + "]" * 255 + "}", "metadata.deep"),
        ('{"s": "a\\ud800b"}', "metadata.s"),
        ('{"\\udc00": 1}', "metadata.\\udc00"),
        ('{"nul": "a\\u0000b"}', "metadata.nul"),
        ('{"a": {"nul\\u0000key": 1}}', "metadata.a.nul\\u0000key"),
        ('{"n": NaN}', "metadata.n"),
        ('{"n": Infinity}', "metadata.n"),
        ('{"n": -Infinity}', "metadata.n"),
        ('{"n": 1e400}', "metadata.n"),
        ('{"n": [-1e999]}', "metadata.n[0]"),
        ('{"big": "' + "x" * 70_000 + '"}', "metadata"),
    ],
)
def test_metadata_that_cannot_be_stored_and_sent_back_is_422(
    client: TestClient, acme: dict[str, Actor], metadata: str, path: str
) -> None:
    response = store_raw(
        client, acme["a1"], f'"content": "c", "thought": "t", "metadata": {metadata}'
    )
    body = error(response, 422, "validation_failed")
    assert any(name.startswith(path) for name in body["details"]), body
    assert listed(client, acme["a1"], status="all") == []


def test_metadata_at_the_limits_is_accepted(client: TestClient, acme: dict[str, Actor]) -> None:
    deepest = "[" * 31 + "]" * 31  # the object is level 1: 32 levels in all
    fields = (
        '"content": "c", "thought": "t", "metadata": {"max": 9223372036854775807, '
        '"min": -9223372036854775808, "f": 1.5e300, "tab": "a\\tb\\u001b", "d": ' + deepest + "}"
    )
    response = store_raw(client, acme["a1"], fields)
    assert response.status_code == 201, response.text
    assert response.json()["data"]["metadata"]["max"] == 2**63 - 1
    one = client.get(f"{BASE}/{response.json()['data']['id']}", headers=acme["a1"].headers)
    assert one.json()["data"]["metadata"] == response.json()["data"]["metadata"]


@pytest.mark.parametrize("field", ["content", "thought"])
@pytest.mark.parametrize("bad", ["a\\u0000b", "a\\ud800b", "\\udfff"])
def test_content_and_thought_without_nul_or_lone_surrogates(
    client: TestClient, acme: dict[str, Actor], field: str, bad: str
) -> None:
    values = {"content": '"c"', "thought": '"t"', field: f'"{bad}"'}
    response = store_raw(client, acme["a1"], ", ".join(f'"{k}": {v}' for k, v in values.items()))
    details = error(response, 422, "validation_failed")["details"]
    assert set(details) & {field, f"memory.{field}"}, details  # pydantic or the domain rule
    assert listed(client, acme["a1"], status="all") == []


@pytest.mark.parametrize("bad", ["Bot\u0000", "Bot\ud800"])
def test_names_and_titles_follow_the_text_rule(
    client: TestClient, acme: dict[str, Actor], bad: str
) -> None:
    ann, a1 = acme["ann"], acme["a1"]

    def send(path: str, who: Actor, body: dict[str, Any]) -> Any:
        raw = json.dumps(body).encode()  # json.dumps writes a lone surrogate as \\ud800
        return client.post(path, content=raw, headers={**who.headers, **JSON_HEADERS})

    register = "/api/v1/me/agents/register"
    for agent in ({"name": bad}, {"name": "Bot", "description": bad}):
        response = send(register, ann, {"agent": agent})
        field = "name" if agent["name"] == bad else "description"
        details = error(response, 422, "validation_failed")["details"]
        assert set(details) & {field, f"agent.{field}"}, details
    for path, who in (("/api/v1/agent/chats", a1), ("/api/v1/me/chats", ann)):
        response = send(path, who, {"chat": {"title": bad}})
        details = error(response, 422, "validation_failed")["details"]
        assert set(details) & {"title", "chat.title"}, details
        rooms = client.get(path, headers=who.headers).json()["data"]
        assert rooms == []
    assert [
        a["name"] for a in client.get("/api/v1/me/agents", headers=ann.headers).json()["data"]
    ] == ["Ann Bot"]


@pytest.mark.parametrize(
    "raw",
    [
        b'{"memory": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # deeper than Python recurses
        b'{"memory": {"content": "c", "thought": "t", "n": ' + b"9" * 5_000 + b"}}",
        b'{"memory": {"content": "\xff\xfe"}}',  # not UTF-8
    ],
)
def test_bodies_python_cannot_read_are_invalid_json(
    client: TestClient, acme: dict[str, Actor], raw: bytes
) -> None:
    response = client.post(BASE, content=raw, headers={**acme["a1"].headers, **JSON_HEADERS})
    assert "body" in error(response, 422, "validation_failed")["details"]


@pytest.fixture
def tuya(client: TestClient, store: Store, world: World) -> Any:
    return tuya_project(client, store, world.org("acme"))


def write_raw(tuya: Any, body: str) -> dict[str, Any]:
    answer: dict[str, Any] = tuya.post(f"{DEVICE}/dev1/memories", body.encode())
    return answer


@pytest.mark.parametrize(
    "body",
    [
        '{"bind_role_type": 2, "memory_list": [{"memory_key": "k", "memory_value": "a\\ud800"}]}',
        '{"bind_role_type": 2, "memory_list": [{"memory_key": "k", "memory_value": "a\\u0000"}]}',
        '{"bind_role_type": 2, "memory_list": '
        '[{"memory_key": "k", "memory_name": "\\udc00", "memory_value": "v"}]}',
        '{"bind_role_type": 1e999, "memory_list": [{"memory_key": "k", "memory_value": "v"}]}',
        '{"bind_role_type": -1e999, "memory_list": [{"memory_key": "k", "memory_value": "v"}]}',
        '{"bind_role_type": NaN, "memory_list": [{"memory_key": "k", "memory_value": "v"}]}',
        '{"bind_role_type": 0, "role_id": "r\\u0000", "memory_list": '
        '[{"memory_key": "k", "memory_value": "v"}]}',
    ],
)
def test_tuya_bad_values_are_1109(tuya: Any, body: str) -> None:
    answer = write_raw(tuya, body)
    assert answer["success"] is False and answer["code"] == 1109, answer
    listed = tuya.get(f"{DEVICE}/dev1/memories", bind_role_type=2)
    assert listed["success"] is True and listed["result"] == [], listed
