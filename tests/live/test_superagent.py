"""Base44 Superagent's memory API against a live server, with a plain HTTP client."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.live.conftest import LiveServer
from tests.world import memory_body


@pytest.fixture(scope="module")
def base44(live: LiveServer) -> dict[str, Any]:
    org = live.admin("create-org", "--name", "Base44")["id"]
    other = live.admin("create-org", "--name", "Elsewhere")["id"]
    sam = live.admin("create-user", "--name", "Sam", "--email", "sam@b44.test", "--org", org)
    kim = live.admin("create-user", "--name", "Kim", "--email", "kim@b44.test", "--org", org)
    out = live.admin("create-user", "--name", "Out", "--email", "out@else.test", "--org", other)
    agent = live.admin("create-agent", "--owner", kim["id"], "--name", "Superagent")
    token = live.admin("create-token", "--user", sam["id"])["token"]
    return {"sam": sam, "kim": kim, "out": out, "agent": agent, "token": token}


def test_recent_memories_and_refusals(live: LiveServer, base44: dict[str, Any]) -> None:
    agent, sam, kim = base44["agent"], base44["sam"], base44["kim"]
    url = f"{live.base_url}/api/agents/{agent['id']}/memory"
    with httpx.Client(timeout=30) as http:
        store = f"{live.base_url}/api/v1/agent/memories"
        bot = {"X-API-Key": agent["api_key"]}
        made: list[dict[str, Any]] = []
        for i in range(260):  # 250 that apply to Sam, 10 that do not
            if i in (5, 50, 100, 150, 255):
                body = memory_body(f"about kim {i}", subject_id=kim["id"])
            elif i in (7, 60, 120, 200, 257):
                body = memory_body(f"private {i}")
            elif i % 2:
                body = memory_body(f"about sam {i}", subject_id=sam["id"])
            else:
                body = memory_body(f"global {i}", scope="organization")
            made.append(http.post(store, json=body, headers=bot).json()["data"])

        listing = http.get(url, headers={"api_key": sam["api_key"]})
        assert listing.status_code == 200
        rows = listing.json()
        for_sam = [
            m for m in made if m["scope"] == "organization" or m.get("subject_id") == sam["id"]
        ]
        assert len(for_sam) == 250
        assert [r["id"] for r in rows] == [m["id"] for m in reversed(for_sam)][:200]
        assert len(rows) == 200
        first = rows[0]
        assert set(first) == {
            "id",
            "content",
            "scope",
            "user_id",
            "conversation_id",
            "created_date",
            "updated_date",
        }
        assert {r["scope"] for r in rows} == {"global", "user"}
        assert all(r["user_id"] == sam["id"] for r in rows if r["scope"] == "user")
        assert all(r["user_id"] is None for r in rows if r["scope"] == "global")
        assert rows == sorted(rows, key=lambda r: r["created_date"], reverse=True)

        owner_view = http.get(url, headers={"Authorization": f"Bearer {kim['api_key']}"}).json()
        assert any(
            r["content"].startswith("private") for r in owner_view
        )  # the owner sees private ones
        assert not any(r["content"].startswith("about sam") for r in owner_view)
        by_token = http.get(url, headers={"Authorization": f"Bearer {base44['token']}"})
        assert by_token.status_code == 200 and by_token.json() == rows

        def refused(response: httpx.Response, status: int) -> None:
            assert response.status_code == status, response.text
            assert response.json()["error"]["request_id"] == response.headers["x-request-id"]

        refused(http.get(url), 401)
        refused(http.get(url, headers={"api_key": agent["api_key"]}), 401)
        refused(http.get(url, headers={"Authorization": f"Bearer {agent['api_key']}"}), 401)
        refused(http.get(url, headers={"X-API-Key": sam["api_key"]}), 401)
        refused(http.get(url, headers={"api_key": base44["out"]["api_key"]}), 403)
        refused(
            http.get(
                f"{live.base_url}/api/agents/{sam['id']}/memory",
                headers={"api_key": sam["api_key"]},
            ),
            404,
        )
        refused(
            http.get(
                f"{live.base_url}/api/agents/nope/memory", headers={"api_key": sam["api_key"]}
            ),
            404,
        )

        mine = next(r for r in rows if r["scope"] == "user")
        shared = next(r for r in rows if r["scope"] == "global")
        kims = next(m for m in made if m.get("subject_id") == kim["id"])
        refused(http.delete(f"{url}/{shared['id']}", headers={"api_key": sam["api_key"]}), 403)
        refused(http.delete(f"{url}/{kims['id']}", headers={"api_key": sam["api_key"]}), 404)
        refused(
            http.delete(f"{url}/{mine['id']}", headers={"api_key": base44["out"]["api_key"]}), 403
        )
        gone = http.delete(f"{url}/{mine['id']}", headers={"api_key": sam["api_key"]})
        assert gone.status_code == 204
        after = http.get(url, headers={"api_key": sam["api_key"]}).json()
        assert mine["id"] not in [r["id"] for r in after]
        refused(http.delete(f"{url}/{mine['id']}", headers={"api_key": sam["api_key"]}), 404)
        assert http.get(f"{store}/{mine['id']}", headers=bot).status_code == 404
