"""The unmodified `tuya-connector-python` against a live Mnemos."""

from __future__ import annotations

import time
from typing import Any

import pytest
import requests
from tuya_connector import TuyaOpenAPI

from tests.live.conftest import LiveServer

DEVICES = "/v1.0/cloud/agent/ai/chat/b/devices"


@pytest.fixture(scope="module")
def tuya(live: LiveServer) -> dict[str, Any]:
    acme = live.admin("create-org", "--name", "Tuya Acme")["id"]
    other = live.admin("create-org", "--name", "Tuya Other")["id"]
    owner = live.admin("create-user", "--name", "Tia", "--email", "tia@tuya.test", "--org", acme)
    role_agent = live.admin("create-agent", "--owner", owner["id"], "--name", "Kid role")
    coach = live.admin("create-agent", "--owner", owner["id"], "--name", "Coach role")
    assert live.admin(
        "bind-tuya-role", "--org", acme, "--role-id", "94300123", "--agent", role_agent["id"]
    ) == {"ok": True}
    project = live.admin("create-tuya-project", "--org", acme)
    foreign = live.admin("create-tuya-project", "--org", other)
    return {
        "acme": acme,
        "project": project,
        "foreign": foreign,
        "role": role_agent,
        "coach": coach,
        "owner": owner,
    }


def connect(live: LiveServer, project: dict[str, str]) -> TuyaOpenAPI:
    api = TuyaOpenAPI(live.base_url, project["client_id"], project["client_secret"])
    response = api.connect()
    assert response["success"] is True, response
    assert isinstance(response["t"], int) and response["tid"]
    return api


def write(
    api: TuyaOpenAPI, device: str, entries: list[dict[str, Any]], **binding: Any
) -> dict[str, Any]:
    body = {"bind_role_type": 2, **binding, "memory_list": entries}
    result: dict[str, Any] = api.post(f"{DEVICES}/{device}/memories", body)
    return result


def entry(key: str, name: str, value: str, scope: int = 1) -> dict[str, Any]:
    return {"memory_key": key, "memory_name": name, "memory_value": value, "effective_scope": scope}


def groups(api: TuyaOpenAPI, device: str, **params: Any) -> dict[int, dict[str, str]]:
    response = api.get(f"{DEVICES}/{device}/memories", params)
    assert response["success"] is True, response
    out: dict[int, dict[str, str]] = {}
    for group in response["result"]:
        assert (
            group["effective_scope_name"]
            == {1: "Global memory", 3: "Role's memory"}[group["effective_scope"]]
        )
        out[group["effective_scope"]] = {
            m["memory_key"]: m["memory_value"] for m in group["memory_list"]
        }
        assert all(m["effective_scope"] == group["effective_scope"] for m in group["memory_list"])
    return out


def test_write_list_overwrite_delete_clear(live: LiveServer, tuya: dict[str, Any]) -> None:
    api = connect(live, tuya["project"])
    device = "6c3585ebfe301b40a8uabc"
    role = {"bind_role_type": 1, "role_id": "94300123"}
    assert (
        write(
            api,
            device,
            [
                entry("sys.memoryAge", "Age", "100 years old"),
                entry("sys.memoryBirthday", "Birthday", "July 7"),
            ],
        )["result"]
        is True
    )
    assert (
        write(api, device, [entry("sys.memoryInterests", "Hobbies", "football, code", 3)], **role)[
            "success"
        ]
        is True
    )
    assert groups(api, device, bind_role_type=2) == {
        1: {"sys.memoryAge": "100 years old", "sys.memoryBirthday": "July 7"}
    }
    assert groups(api, device, **role) == {
        1: {"sys.memoryAge": "100 years old", "sys.memoryBirthday": "July 7"},
        3: {"sys.memoryInterests": "football, code"},
    }
    # another role of the same organization sees the global memory, not the first role's
    coach = {"bind_role_type": 0, "role_id": tuya["coach"]["id"]}
    assert groups(api, device, **coach) == {
        1: {"sys.memoryAge": "100 years old", "sys.memoryBirthday": "July 7"}
    }
    # overwriting a key supersedes the old value, which stays in history (seen through Band)
    write(api, device, [entry("sys.memoryAge", "Age", "101 years old")])
    assert groups(api, device, bind_role_type=2)[1]["sys.memoryAge"] == "101 years old"
    write(api, device, [entry("sys.memoryInterests", "Hobbies", "chess", 3)], **role)
    assert groups(api, device, **role)[3] == {"sys.memoryInterests": "chess"}
    history = requests.get(
        f"{live.base_url}/api/v1/agent/memories",
        params={"status": "all"},
        headers={"X-API-Key": tuya["role"]["api_key"]},
        timeout=10,
    ).json()["data"]
    assert [(m["content"], m["status"]) for m in history] == [
        ("chess", "active"),
        ("football, code", "superseded"),
    ]
    # delete named keys, then clear everything
    deleted = api.delete(
        f"{DEVICES}/{device}/memories", {"bind_role_type": 2, "memory_keys": "sys.memoryBirthday"}
    )
    assert deleted["result"] is True
    assert groups(api, device, bind_role_type=2) == {1: {"sys.memoryAge": "101 years old"}}
    assert (
        api.delete(f"{DEVICES}/{device}/memories", {**role, "clear_all_memory": True})["success"]
        is True
    )
    assert groups(api, device, **role) == {}
    assert api.get(f"{DEVICES}/{device}/memory/switch")["result"] == {
        "memory_open": True,
        "summary_open": False,
    }
    assert api.delete(f"{DEVICES}/{device}/chat-context", role)["result"] is True


def test_refusals_in_tuya_codes(live: LiveServer, tuya: dict[str, Any]) -> None:
    api = connect(live, tuya["project"])
    device = "dev-owned-by-acme"
    write(api, device, [entry("sys.memoryUserFullName", "Name", "Tuyaya")])
    foreign = connect(live, tuya["foreign"])
    for response in (
        foreign.get(f"{DEVICES}/{device}/memories", {"bind_role_type": 2}),
        write(foreign, device, [entry("sys.memoryAge", "Age", "1")]),
        foreign.delete(
            f"{DEVICES}/{device}/memories", {"bind_role_type": 2, "clear_all_memory": True}
        ),
    ):
        assert (response["success"], response["code"]) == (False, 1106), response
    assert groups(api, device, bind_role_type=2) == {1: {"sys.memoryUserFullName": "Tuyaya"}}

    def code(response: dict[str, Any]) -> int:
        assert response["success"] is False and isinstance(response["msg"], str) and response["tid"]
        return int(response["code"])

    assert code(api.get(f"{DEVICES}/{device}/memories", {})) == 1100
    assert code(api.get(f"{DEVICES}/{device}/memories", {"bind_role_type": 7})) == 1109
    assert code(api.get(f"{DEVICES}/{device}/memories", {"bind_role_type": 1})) == 1100
    assert (
        code(api.get(f"{DEVICES}/{device}/memories", {"bind_role_type": 1, "role_id": "nobody"}))
        == 1109
    )
    assert code(api.delete(f"{DEVICES}/{device}/memories", {"bind_role_type": 2})) == 1100
    keys = ",".join(f"k{i}" for i in range(21))
    assert (
        code(api.delete(f"{DEVICES}/{device}/memories", {"bind_role_type": 2, "memory_keys": keys}))
        == 1109
    )
    assert code(write(api, device, [entry("bad key!", "x", "y")])) == 1109
    assert code(write(api, device, [entry("k", "x", "y", 3)])) == 1109  # role scope needs a role
    assert code(write(api, device, [])) == 1100

    # a wrong secret signs wrongly: 1004; a forged token: 1011
    forged = TuyaOpenAPI(live.base_url, tuya["project"]["client_id"], "0" * 32)
    assert code(forged.connect()) == 1004
    api.token_info.access_token = "f" * 32
    assert code(api.get(f"{DEVICES}/{device}/memory/switch")) == 1011


def test_expired_token_is_1010_and_the_connector_reconnects(
    live: LiveServer, tuya: dict[str, Any]
) -> None:
    api = connect(live, tuya["project"])
    token = api.token_info.access_token
    expired = requests.get(
        f"{live.base_url}/v1.0/token/{api.token_info.refresh_token}", timeout=10
    ).json()
    assert expired["success"] is False  # unsigned
    # expire the token in the database the way time would
    import sqlalchemy as sa

    from mnemos.domain.tuya_auth import _hash
    from mnemos.storage.postgres import driver_url

    url = live.env["MNEMOS_DATABASE_URL"]
    engine = sa.create_engine(driver_url(url))
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE tuya_tokens SET expires_at = :past WHERE token_hash = :h"),
            {
                "past": "2000-01-01 00:00:00.000000"
                if url.startswith("sqlite")
                else "2000-01-01T00:00:00Z",
                "h": _hash(token),
            },
        )
    engine.dispose()
    raw = requests.get(
        f"{live.base_url}{DEVICES}/d1/memory/switch",
        headers={
            "client_id": tuya["project"]["client_id"],
            "access_token": token,
            "t": str(int(time.time() * 1000)),
            "sign": "x",
        },
        timeout=10,
    ).json()
    assert raw["code"] == 1004  # the signature is checked first
    response = api.get(f"{DEVICES}/d1/memory/switch")
    assert response["code"] == 1010
    assert api.token_info is not None and api.token_info.access_token != token  # it reconnected
    assert api.get(f"{DEVICES}/d1/memory/switch")["success"] is True
    # near expiry the connector refreshes by itself: GET /v1.0/token/{refresh_token}
    before = api.token_info.access_token
    api.token_info.expire_time = 0
    assert api.get(f"{DEVICES}/d1/memory/switch")["success"] is True
    assert api.token_info.access_token not in ("", before)
    stale = TuyaOpenAPI(
        live.base_url, tuya["project"]["client_id"], tuya["project"]["client_secret"]
    )
    stale.connect()
    stale.token_info.access_token = before
    assert stale.get(f"{DEVICES}/d1/memory/switch")["code"] == 1011  # the replaced pair is gone
