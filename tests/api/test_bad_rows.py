"""One row's content never breaks a list: bad values planted directly in the database by SQL.

Rows written before the value rules (or by other programs) can hold what the rules now refuse.
Every list and get that includes such a row answers 200: JSON the database holds but Python
cannot read becomes a marker (`storage.rows.read_json`), and what orjson cannot encode is
replaced in the answer (`api.responses.encodable`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.domain.queries import Audience, MemoryQuery
from mnemos.storage.base import Store
from mnemos.storage.postgres import driver_url
from mnemos.storage.rows import UNREADABLE_JSON
from tests.api.test_band_agent import BASE, store
from tests.api.tuya_calls import DEVICE, TuyaProject, tuya_project
from tests.world import World

ME = "/api/v1/me/memories"

# Metadata JSON text both databases hold, and what the answer shows for it.
BOTH: dict[str, tuple[str, Any]] = {
    "huge integers": (
        '{"big": 18446744073709551616, "neg": -99999999999999999999}',
        {"big": "18446744073709551616", "neg": "-99999999999999999999"},
    ),
    "300 levels": ('{"deep": ' + "[" * 300 + "]" * 300 + "}", None),
    "5000 levels": ('{"deep": ' + "[" * 5000 + "]" * 5000 + "}", UNREADABLE_JSON),
    "5000 digits": ('{"d": ' + "9" * 5000 + "}", UNREADABLE_JSON),
    "lone surrogates": ('{"s": "a\\ud800", "\\udc00": 1}', {"s": "a\ufffd", "\ufffd": 1}),
    "NUL": ('{"z": "a\\u0000b"}', {"z": "a\x00b"}),
    "1e400": ('{"e": 1e400, "f": -1e400}', {"e": None, "f": None}),
}
# Text only SQLite holds (PostgreSQL's json refuses it).
SQLITE_ONLY: dict[str, tuple[str, Any]] = {
    "NaN and Infinity": (
        '{"n": NaN, "i": Infinity, "m": -Infinity}',
        {"n": None, "i": None, "m": None},
    ),
    "not JSON": ("{not json", UNREADABLE_JSON),
}


class Planter:
    """Writes straight into the database, behind the application's back."""

    def __init__(self, url: str):
        self.engine = sa.create_engine(driver_url(url))
        self.postgres = self.engine.dialect.name == "postgresql"

    def set(self, memory_id: str, column: str, sql_value: str, **params: Any) -> None:
        ident: Any = uuid.UUID(memory_id)
        ident = ident if self.postgres else ident.hex
        with self.engine.begin() as conn:
            done = conn.execute(
                sa.text(f"UPDATE memories SET {column} = {sql_value} WHERE id = :id"),
                {"id": ident, **params},
            )
            assert done.rowcount == 1

    def metadata(self, memory_id: str, text: str) -> None:
        self.set(memory_id, "metadata", "CAST(:m AS json)" if self.postgres else ":m", m=text)


@pytest.fixture
def planter(database_url: str) -> Iterator[Planter]:
    planter = Planter(database_url)
    yield planter
    planter.engine.dispose()


@pytest.fixture
def cast(client: TestClient, store: Store, world: World) -> dict[str, Any]:
    ann, bob = world.user("Ann", "acme"), world.user("Bob", "acme")
    return {
        "ann": ann,
        "a1": world.agent(ann, "Ann Bot"),
        "b1": world.agent(bob, "Bob Bot"),
        "tuya": tuya_project(client, store, world.org("acme")),
    }


def answered(client: TestClient, path: str, headers: dict[str, str], **params: Any) -> Any:
    response = client.get(path, params=params, headers=headers)
    assert response.status_code == 200, response.text[:500]
    return response.json()


def test_planted_metadata_never_breaks_a_list_or_a_get(
    client: TestClient, cast: dict[str, Any], planter: Planter
) -> None:
    ann, a1, b1 = cast["ann"], cast["a1"], cast["b1"]
    kinds = {**BOTH, **({} if planter.postgres else SQLITE_ONLY)}
    planted: dict[str, Any] = {}
    for kind, (text, shown) in kinds.items():
        memory_id = store(client, b1, kind, scope="organization")["id"]
        planter.metadata(memory_id, text)
        planted[memory_id] = shown
    store(client, b1, "a good memory", scope="organization", metadata={"ok": 1})
    nul = None
    if not planter.postgres:  # PostgreSQL text holds neither NUL nor lone surrogates
        nul = store(client, b1, "nul", scope="organization")["id"]
        planter.set(nul, "content", ":c", c="a\x00b")
        planter.set(nul, "thought", ":c", c="\x00")

    lists = [
        answered(client, BASE, a1.headers, memory_scope="org", limit=100)["data"],
        answered(client, BASE, b1.headers, limit=100)["data"],
        answered(client, BASE, b1.headers, page=1, page_size=50)["data"],
        answered(client, ME, ann.headers, limit=100)["data"],
    ]
    for rows in lists:
        by_id = {row["id"]: row for row in rows}
        assert set(planted) <= set(by_id)
        for memory_id, shown in planted.items():
            if shown is not None:
                assert by_id[memory_id]["metadata"] == shown
        if nul is not None:
            assert (by_id[nul]["content"], by_id[nul]["thought"]) == ("a\x00b", "\x00")
    superagent = answered(client, f"/api/agents/{b1.id}/memory", {"api_key": ann.api_key})
    assert set(planted) <= {row["id"] for row in superagent}
    for memory_id in planted:
        answered(client, f"{BASE}/{memory_id}", a1.headers)
        answered(client, f"{ME}/{memory_id}", ann.headers)


def write(tuya: TuyaProject, *entries: tuple[str, str]) -> None:
    memory_list = [{"memory_key": key, "memory_value": value} for key, value in entries]
    body = json.dumps({"bind_role_type": 2, "memory_list": memory_list}).encode()
    assert tuya.post(f"{DEVICE}/dev1/memories", body)["success"] is True


def test_planted_tuya_rows_never_break_the_tuya_list(
    cast: dict[str, Any], planter: Planter, store: Store
) -> None:
    tuya: TuyaProject = cast["tuya"]
    write(tuya, ("name", "Ann"), ("deep", "x"), ("huge", "y"))
    rows = {m.content: str(m.id) for m in _device_memories(store)}
    tuya_meta = (
        '{"tuya": {"device_id": "dev1", "memory_key": "%s", "memory_name": %s,'
        ' "effective_scope": 1, "slot": "1:%s"}%s}'
    )
    planter.metadata(rows["Ann"], tuya_meta % ("name", '"\\ud800"', "name", ""))
    planter.metadata(rows["y"], tuya_meta % ("huge", '"h"', "huge", ', "n": 18446744073709551616'))
    planter.metadata(
        rows["x"], tuya_meta % ("deep", '"d"', "deep", ', "d": ' + "[" * 300 + "]" * 300)
    )
    listed = tuya.get(f"{DEVICE}/dev1/memories", bind_role_type=2)
    assert listed["success"] is True, listed
    names = {m["memory_key"]: m["memory_name"] for m in listed["result"][0]["memory_list"]}
    assert names == {"name": "\ufffd", "huge": "h", "deep": "d"}


def _device_memories(store: Store) -> list[Any]:
    found = store.tuya_device("dev1")
    assert found is not None
    query = MemoryQuery(audiences=(Audience(organization_id=found[0], subject_id=found[1]),))
    return list(store.list_memories(query, limit=100))
