"""`/mcp` meets the same gates as every REST route: per-credential request limits, the
failed-authentication limit, the body size limit and repeated credential headers; and the tool
catalogue's contract (names, arguments, descriptions), derived from the REST API's models."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import jsonschema
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.mcp.tools import AGENT_TOOLS, ARGUMENT_HELP, PERSON_TOOLS
from mnemos.storage.base import Store
from tests.api.test_band_agent import BASE, error
from tests.world import World, memory_body

HEADERS = {"Accept": "application/json, text/event-stream"}


def initialize(request_id: int = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}


def test_mcp_requests_count_against_the_callers_limit(
    settings: Settings, store: Store, world: World
) -> None:
    agent = world.agent(world.user("Rae", "mcp"))
    other = world.agent(world.user("Roe", "mcp"))
    limited = settings.model_copy(update={"rate_limit_per_minute": 3})
    with TestClient(create_app(limited, store)) as client:
        headers = {**HEADERS, **agent.headers}
        answers = [client.post("/mcp", json=initialize(), headers=headers) for _ in range(2)]
        answers.append(client.get(BASE, headers=agent.headers))  # REST and MCP share one count
        assert [a.status_code for a in answers] == [200, 200, 200]
        assert answers[1].headers["x-ratelimit-remaining"] == "1"
        refused = client.post("/mcp", json=call("list_memories", {}), headers=headers)
        error(refused, 429, "rate_limited")
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        allowed = client.post("/mcp", json=initialize(), headers={**HEADERS, **other.headers})
        assert allowed.status_code == 200


def test_failed_authentications_are_limited_per_address(
    settings: Settings, store: Store, world: World
) -> None:
    agent = world.agent(world.user("Fay", "mcp"))
    guarded = settings.model_copy(update={"auth_failures_per_minute": 2})
    with TestClient(create_app(guarded, store)) as client:
        for _ in range(2):
            bad = client.post("/mcp", json=initialize(), headers={"X-API-Key": "mn_agent_nope"})
            error(bad, 401, "unauthorized")
        good = client.post("/mcp", json=initialize(), headers={**HEADERS, **agent.headers})
        error(
            good, 429, "rate_limited"
        )  # even a good key, from this address, until the minute ends


def test_body_limit_and_repeated_credentials(
    settings: Settings, store: Store, world: World
) -> None:
    agent = world.agent(world.user("Bea", "mcp"))
    small = settings.model_copy(update={"max_body_bytes": 2048})
    with TestClient(create_app(small, store)) as client:
        headers = {**HEADERS, **agent.headers}
        fits = client.post(
            "/mcp", json=call("store_memory", memory_body("x" * 100)["memory"]), headers=headers
        )
        assert fits.status_code == 200 and not fits.json()["result"]["isError"]
        big = call("store_memory", memory_body("x" * 4000)["memory"])
        error(client.post("/mcp", json=big, headers=headers), 413, "payload_too_large")
        twice = [("X-API-Key", agent.api_key), ("X-API-Key", agent.api_key)]
        duplicated = client.post(
            "/mcp", content=json.dumps(initialize()), headers=[*HEADERS.items(), *twice]
        )
        error(duplicated, 400, "duplicate_header")
        stored = client.get(BASE, headers=agent.headers).json()["data"]
        assert [m["content"] for m in stored] == ["x" * 100]  # the refused store never ran


def test_tool_catalogue_contract() -> None:
    for tool in (*AGENT_TOOLS, *PERSON_TOOLS):
        schema = tool.input_schema()
        assert schema["type"] == "object"
        for name, prop in schema["properties"].items():
            assert prop.get("description"), f"{tool.name}.{name}"
        assert tool.output_schema()["type"] == "object"
    names = {
        name for tool in (*AGENT_TOOLS, *PERSON_TOOLS) for name in tool.input_schema()["properties"]
    }
    assert set(ARGUMENT_HELP) <= names  # no help for an argument no tool has


def test_output_schemas_are_plain_and_still_check_the_answer() -> None:
    """Clients check every result against the output schema: it has no `$ref` (resolved per
    listed memory) and no `anyOf` (tried branch by branch), yet refuses what the model would."""
    memory = {
        "id": "m",
        "content": "c",
        "thought": None,
        "system": "long_term",
        "type": "semantic",
        "segment": "user",
        "scope": "agent",
        "status": "active",
        "subject_id": None,
        "organization_id": None,
        "source_agent_id": "a",
        "chat_room_id": None,
        "metadata": {},
        "inserted_at": "2026-12-02T00:00:00Z",
        "updated_at": "2026-12-02T00:00:00Z",
    }
    for tool in (*AGENT_TOOLS, *PERSON_TOOLS):
        text = json.dumps(tool.output_schema())
        assert '"$ref"' not in text and '"anyOf"' not in text, tool.name
    search = next(tool for tool in AGENT_TOOLS if tool.name == "search_memories")
    check = jsonschema.Draft202012Validator(search.output_schema())
    assert check.is_valid({"memories": [memory], "next_cursor": None})
    assert not check.is_valid({"memories": [{**memory, "thought": 5}], "next_cursor": None})
    assert not check.is_valid({"memories": [{**memory, "content": None}], "next_cursor": "x"})
    assert not check.is_valid({"memories": [memory], "next_cursor": 3})
    missing = {key: value for key, value in memory.items() if key != "subject_id"}
    assert not check.is_valid({"memories": [missing], "next_cursor": None})


def test_without_the_sdk_mcp_says_how_to_install_it(database_url: str) -> None:
    """A server installed without the `mcp` extra answers 501 with the command to run."""
    script = textwrap.dedent(
        f"""
        import importlib.abc, json, sys

        class NoMcp(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "mcp" or name.startswith("mcp."):
                    raise ModuleNotFoundError(name)
                return None

        sys.meta_path.insert(0, NoMcp())
        from fastapi.testclient import TestClient
        from mnemos.api.app import create_app
        from mnemos.config import Settings

        settings = Settings(database_url={database_url!r})
        with TestClient(create_app(settings)) as client:
            answer = client.post("/mcp", json={{}}, headers={{"X-API-Key": "mn_agent_x"}})
            print(json.dumps({{"status": answer.status_code, "body": answer.json()}}))
            assert "mcp" not in sys.modules
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["status"] == 501
    assert answer["body"]["error"]["code"] == "mcp_not_installed"
    assert "pip install 'mcp>=2.3,<3'" in answer["body"]["error"]["message"]


def test_search_memories_takes_the_rest_routes_limits(
    settings: Settings, store: Store, world: World
) -> None:
    """`search_memories` pages like `GET /api/v1/agent/memories/search`: 1-50 a page."""
    agent = world.agent(world.user("Sal", "mcp"))
    headers = {**HEADERS, **agent.headers}
    with TestClient(create_app(settings, store)) as client:
        for limit, refused in ((50, False), (51, True), (0, True)):
            answer = client.post(
                "/mcp",
                json=call("search_memories", {"query": "x", "limit": limit}),
                headers=headers,
            )
            assert answer.status_code == 200, answer.text
            assert ("invalid_pagination" in answer.text) is refused, answer.text


def test_the_install_advice_names_the_extras_requirement() -> None:
    """`MCP_INSTALL` repeats the `mcp` extra's requirement from pyproject.toml: kept equal."""
    import tomllib
    from pathlib import Path

    from mnemos.errors import MCP_INSTALL

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    (requirement,) = project["project"]["optional-dependencies"]["mcp"]
    assert f"pip install '{requirement}'" in MCP_INSTALL
