"""MCP's fixes after review20 beyond its strict xfails (tests/test_review20.py): what review20
noticed without filing it (docs/decisions.md, "review20's findings fixed")."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.test_mcp import HEADERS, call
from tests.world import World, memory_body

AGENT_MEMORIES = "/api/v1/agent/memories"


def test_delete_memory_answers_the_memorys_own_id(client: TestClient, world: World) -> None:
    """`memory_id` takes any spelling of a UUID the REST path does (upper case, braces,
    `urn:uuid:`); the answer names the memory by its id, as every other tool's answer does, not
    by the spelling sent."""
    ann = world.user("Ann", "Acme")
    bot = world.agent(ann)
    ids = []
    for content in ("Ann likes tea", "Ann likes trains", "Ann likes maps"):
        stored = client.post(
            AGENT_MEMORIES, json=memory_body(content, subject_id=ann.id), headers=bot.headers
        )
        assert stored.status_code == 201, stored.text
        ids.append(stored.json()["data"]["id"])
    spellings = [f"urn:uuid:{ids[0]}", "{" + ids[1].upper() + "}", ids[2].upper()]
    for memory_id, spelled in zip(ids, spellings, strict=True):
        answer = client.post(
            "/mcp",
            json=call("delete_memory", {"memory_id": spelled}),
            headers={**HEADERS, **ann.headers},
        )
        assert answer.status_code == 200, answer.text
        result = answer.json()["result"]
        assert not result.get("isError"), result
        assert result["structuredContent"] == {"id": memory_id, "deleted": True}, spelled
        assert memory_id in result["content"][0]["text"]
