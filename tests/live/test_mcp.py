"""MCP against a live `mnemos serve` (and `mnemos mcp` over stdio), with the official `mcp`
client: every tool, the visibility rules, bad arguments, 401s and plan off, each checked against
what the REST API answers for the same request."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mnemos.domain.memories import MemoryDraft
from tests.conftest import BACKENDS
from tests.live.conftest import LiveServer, _database_for, start_server, stop_server
from tests.live.mcp_client import (
    bearer,
    http_session,
    ok,
    over_http,
    refused,
    stdio_session,
    text,
)

pytestmark = pytest.mark.live

AGENT_API = "/api/v1/agent/memories"
HUMAN_API = "/api/v1/me/memories"

# The contract: tool names and their required arguments, for each kind of credential.
AGENT_TOOLS = {
    "store_memory": ["content", "segment", "system", "thought", "type"],
    "search_memories": ["query"],
    "list_memories": [],
    "get_memory": ["memory_id"],
    "supersede_memory": ["memory_id"],
    "archive_memory": ["memory_id"],
}
PERSON_TOOLS = {
    "list_memories": [],
    "get_memory": ["memory_id"],
    "supersede_memory": ["memory_id"],
    "archive_memory": ["memory_id"],
    "restore_memory": ["memory_id"],
    "delete_memory": ["memory_id"],
}


@dataclass
class Actors:
    live: LiveServer
    ann: dict[str, Any]  # a person of organization A, owner of a1 and a2
    ann_token: str
    a1: dict[str, Any]
    a2: dict[str, Any]  # a1's peer: same owner, same organization
    bob: dict[str, Any]  # a person of organization B, owner of b1
    b1: dict[str, Any]

    def rest(self, key: str) -> httpx.Client:
        return httpx.Client(base_url=self.live.base_url, headers={"X-API-Key": key})


@pytest.fixture(scope="module")
def actors(live: LiveServer) -> Actors:
    org_a = live.admin("create-org", "--name", "A")["id"]
    org_b = live.admin("create-org", "--name", "B")["id"]
    ann = live.admin("create-user", "--name", "Ann", "--email", "ann@a.test", "--org", org_a)
    bob = live.admin("create-user", "--name", "Bob", "--email", "bob@b.test", "--org", org_b)
    token = live.admin("create-token", "--user", ann["id"], "--ttl", "3600")["token"]
    return Actors(
        live,
        ann,
        token,
        live.admin("create-agent", "--owner", ann["id"], "--name", "A one"),
        live.admin("create-agent", "--owner", ann["id"], "--name", "A two"),
        bob,
        live.admin("create-agent", "--owner", bob["id"], "--name", "B one"),
    )


def draft(content: str, **fields: Any) -> dict[str, Any]:
    return {
        "content": content,
        "system": "long_term",
        "type": "semantic",
        "segment": "user",
        "thought": "worth keeping",
        **fields,
    }


def store(actors: Actors, agent: dict[str, Any], **fields: Any) -> dict[str, Any]:
    async def work(session: ClientSession) -> dict[str, Any]:
        return ok(await session.call_tool("store_memory", draft(**fields)))

    return over_http(actors.live.base_url, bearer(agent["api_key"]), work)


def embedded(actors: Actors, key: str, *memory_ids: str, **params: Any) -> None:
    """Wait until the server's embedding worker has embedded these memories (a search by
    meaning of the agent of `key`, with `params`, finds them), at most a minute."""
    deadline = time.monotonic() + 60
    with actors.rest(key) as rest:
        while time.monotonic() < deadline:
            query = {"query": "memory", "mode": "semantic", "limit": 50, **params}
            answer = rest.get(f"{AGENT_API}/search", params=query)
            assert answer.status_code == 200, answer.text
            if set(memory_ids) <= {row["id"] for row in answer.json()["data"]}:
                return
            time.sleep(0.2)
    pytest.fail(f"{memory_ids} were not embedded within a minute")


def rest_search(actors: Actors, key: str, **params: Any) -> list[str]:
    """The ids the REST search answers (hybrid, the default mode)."""
    with actors.rest(key) as rest:
        answer = rest.get(f"{AGENT_API}/search", params=params)
    assert answer.status_code == 200, answer.text
    return [row["id"] for row in answer.json()["data"]]


def test_tools_are_pinned(actors: Actors) -> None:
    async def listed(session: ClientSession) -> dict[str, Any]:
        return {tool.name: tool for tool in (await session.list_tools()).tools}

    base = actors.live.base_url
    for credential, expected in (
        (actors.a1["api_key"], AGENT_TOOLS),
        (actors.ann["api_key"], PERSON_TOOLS),
        (actors.ann_token, PERSON_TOOLS),
    ):
        tools = over_http(base, bearer(credential), listed)
        assert {name: sorted(t.input_schema.get("required", [])) for name, t in tools.items()} == (
            expected
        )
        for tool in tools.values():
            assert len(tool.description or "") > 80
            assert tool.output_schema is not None
            for name, prop in tool.input_schema["properties"].items():
                assert prop.get("description"), f"{tool.name}.{name} has no description"
    # store_memory takes exactly the REST store request's fields (the domain's MemoryDraft).
    tools = over_http(base, bearer(actors.a1["api_key"]), listed)
    assert set(tools["store_memory"].input_schema["properties"]) == set(
        MemoryDraft.__dataclass_fields__
    )


def test_agent_tools_answer_what_rest_answers(actors: Actors) -> None:
    key = actors.a1["api_key"]

    async def work(session: ClientSession) -> dict[str, Any]:
        stored = ok(await session.call_tool("store_memory", draft("Ann drinks oolong tea daily")))
        other = ok(await session.call_tool("store_memory", draft("Tea breaks are at four")))
        coffee = ok(await session.call_tool("store_memory", draft("Coffee is for emergencies")))
        await asyncio.to_thread(embedded, actors, key, stored["id"], other["id"], coffee["id"])
        found = ok(await session.call_tool("search_memories", {"query": "oolong tea"}))
        page = ok(await session.call_tool("search_memories", {"query": "tea", "limit": 1}))
        rest = ok(
            await session.call_tool(
                "search_memories", {"query": "tea", "cursor": page["next_cursor"]}
            )
        )
        listed = ok(await session.call_tool("list_memories", {"content_query": "tea"}))
        got = ok(await session.call_tool("get_memory", {"memory_id": stored["id"]}))
        superseded = ok(await session.call_tool("supersede_memory", {"memory_id": stored["id"]}))
        archived = ok(await session.call_tool("archive_memory", {"memory_id": other["id"]}))
        after = ok(await session.call_tool("list_memories", {"content_query": "tea"}))
        return {
            "stored": stored,
            "other": other,
            "coffee": coffee,
            "found": found,
            "pages": [page, rest],
            "listed": listed,
            "got": got,
            "superseded": superseded,
            "archived": archived,
            "after": after,
            "text": text(await session.call_tool("get_memory", {"memory_id": stored["id"]})),
        }

    seen = over_http(actors.live.base_url, {"X-API-Key": key}, work)
    with actors.rest(key) as rest:
        assert seen["got"]["content"] == "Ann drinks oolong tea daily"
        assert seen["superseded"] == rest.get(f"{AGENT_API}/{seen['stored']['id']}").json()["data"]
        assert seen["archived"] == rest.get(f"{AGENT_API}/{seen['other']['id']}").json()["data"]
        assert seen["superseded"]["status"] == "superseded"
        assert seen["archived"]["status"] == "archived"
    # Search is hybrid, as REST's: the best match first, then the next page continues without
    # repeats; the memories with the words first, then the one only near in meaning.
    assert seen["found"]["memories"][0]["id"] == seen["stored"]["id"]
    assert seen["found"]["next_cursor"] is None
    paged = [m["id"] for page in seen["pages"] for m in page["memories"]]
    assert sorted(paged[:2]) == sorted([seen["stored"]["id"], seen["other"]["id"]])
    assert paged[2:] == [seen["coffee"]["id"]]
    # Lists are newest first, as REST lists them; superseded and archived drop out.
    assert [m["id"] for m in seen["listed"]["memories"]] == [
        seen["other"]["id"],
        seen["stored"]["id"],
    ]
    assert seen["after"] == {"memories": [], "next_cursor": None}
    assert seen["stored"]["id"] in seen["text"] and "oolong" in seen["text"]


def test_person_tools_answer_what_rest_answers(actors: Actors) -> None:
    about_ann = store(
        actors,
        actors.a1,
        content="Ann is allergic to nuts",
        scope="subject",
        subject_id=actors.ann["id"],
    )
    private = store(actors, actors.a2, content="Ann's agent keeps its notes short")

    async def work(session: ClientSession) -> dict[str, Any]:
        return {
            "about_me": ok(await session.call_tool("list_memories", {"scope": "about_me"})),
            "all": ok(await session.call_tool("list_memories", {"limit": 100})),
            "got": ok(await session.call_tool("get_memory", {"memory_id": about_ann["id"]})),
            "archived": ok(await session.call_tool("archive_memory", {"memory_id": private["id"]})),
            "restored": ok(await session.call_tool("restore_memory", {"memory_id": private["id"]})),
            "not_archived": refused(
                await session.call_tool("restore_memory", {"memory_id": private["id"]}),
                "memory_not_archived",
            ),
            "superseded": ok(
                await session.call_tool("supersede_memory", {"memory_id": private["id"]})
            ),
            "deleted": ok(await session.call_tool("delete_memory", {"memory_id": about_ann["id"]})),
        }

    with actors.rest(actors.ann["api_key"]) as rest:
        before = rest.get(HUMAN_API, params={"scope": "about_me"}).json()["data"]
        one = rest.get(f"{HUMAN_API}/{about_ann['id']}").json()["data"]
        everything = rest.get(HUMAN_API, params={"limit": 100}).json()["data"]
        # A person's token (Bearer JWT) and key (X-API-Key) reach the same tools.
        seen = over_http(actors.live.base_url, bearer(actors.ann_token), work)
        assert seen["about_me"]["memories"] == before
        assert seen["all"]["memories"] == everything
        assert seen["got"] == one
        assert seen["got"]["subject_name"] == "Ann"  # the human API's display fields
        assert seen["archived"]["status"] == "archived"
        assert seen["restored"]["status"] == "active"
        assert seen["superseded"] == rest.get(f"{HUMAN_API}/{private['id']}").json()["data"]
        assert seen["deleted"] == {"id": about_ann["id"], "deleted": True}
        assert rest.get(f"{HUMAN_API}/{about_ann['id']}").status_code == 404


def rest_code(response: httpx.Response) -> str:
    code: str = response.json()["error"]["code"]
    return code


def test_visibility_is_the_rest_apis(actors: Actors) -> None:
    private = store(actors, actors.a1, content="Private plan for the zeppelin launch")
    shared = store(
        actors, actors.a1, content="Zeppelin launches need two pilots", scope="organization"
    )

    def as_agent(agent: dict[str, Any]) -> dict[str, Any]:
        async def work(session: ClientSession) -> dict[str, Any]:
            call = session.call_tool
            return {
                "get_private": await call("get_memory", {"memory_id": private["id"]}),
                "get_shared": await call("get_memory", {"memory_id": shared["id"]}),
                "search": await call(
                    "search_memories", {"query": "zeppelin", "memory_scope": "org", "scope": "all"}
                ),
                "search_mine": await call("search_memories", {"query": "zeppelin"}),
                "list_org": await call(
                    "list_memories", {"memory_scope": "org", "content_query": "zeppelin"}
                ),
                "supersede_shared": await call("supersede_memory", {"memory_id": shared["id"]}),
                "delete": await call("delete_memory", {"memory_id": shared["id"]}),
            }

        return over_http(actors.live.base_url, bearer(agent["api_key"]), work)

    embedded(
        actors, actors.a1["api_key"], private["id"], shared["id"], memory_scope="org", scope="all"
    )
    peer, stranger = as_agent(actors.a2), as_agent(actors.b1)
    # A peer agent sees the organization memory, never a1's private one, and cannot change it.
    refused(peer["get_private"], "not_found")
    assert ok(peer["get_shared"])["id"] == shared["id"]
    org_search = {"query": "zeppelin", "memory_scope": "org", "scope": "all"}
    peer_found = [m["id"] for m in ok(peer["search"])["memories"]]
    assert peer_found[0] == shared["id"] and private["id"] not in peer_found
    assert peer_found == rest_search(actors, actors.a2["api_key"], **org_search)
    assert shared["id"] not in [m["id"] for m in ok(peer["search_mine"])["memories"]]
    assert [m["id"] for m in ok(peer["list_org"])["memories"]] == [shared["id"]]
    refused(peer["supersede_shared"], "forbidden")
    refused(peer["delete"], "unauthorized")  # a person's tool: not for an agent's key
    # Another organization sees nothing.
    refused(stranger["get_private"], "not_found")
    refused(stranger["get_shared"], "not_found")
    stranger_found = [m["id"] for m in ok(stranger["search"])["memories"]]
    assert not {private["id"], shared["id"]} & set(stranger_found)
    assert stranger_found == rest_search(actors, actors.b1["api_key"], **org_search)
    assert ok(stranger["list_org"])["memories"] == []
    refused(stranger["supersede_shared"], "not_found")
    # The same requests over REST give the same codes.
    with actors.rest(actors.a2["api_key"]) as rest:
        assert rest_code(rest.get(f"{AGENT_API}/{private['id']}")) == "not_found"
        assert rest_code(rest.post(f"{AGENT_API}/{shared['id']}/supersede")) == "forbidden"

    # A person: Bob (organization B) may not see Ann's organization memory; Ann may, but may
    # not delete it (it is neither about her nor private to her agent).
    async def bob(session: ClientSession) -> list[Any]:
        return [
            await session.call_tool("get_memory", {"memory_id": shared["id"]}),
            await session.call_tool("list_memories", {"content_query": "zeppelin"}),
            await session.call_tool("store_memory", draft("people cannot store")),
        ]

    got, listed, stored = over_http(actors.live.base_url, {"X-API-Key": actors.bob["api_key"]}, bob)
    with actors.rest(actors.bob["api_key"]) as rest:
        assert (
            refused(got, rest_code(rest.get(f"{HUMAN_API}/{shared['id']}")))["code"] == "forbidden"
        )
    assert ok(listed)["memories"] == []
    refused(stored, "unauthorized")

    async def ann(session: ClientSession) -> Any:
        return await session.call_tool("delete_memory", {"memory_id": shared["id"]})

    refused(over_http(actors.live.base_url, bearer(actors.ann["api_key"]), ann), "forbidden")


BAD_CALLS: list[tuple[str, dict[str, Any], str, str | None]] = [
    ("store_memory", draft("x", system="sensory"), "invalid_memory_type", None),
    ("store_memory", draft("x", scope="subject"), "subject_id_required", None),
    (
        "store_memory",
        draft("x", scope="agent", subject_id="018f0000-0000-7000-8000-000000000000"),
        "subject_id_requires_subject_scope",
        None,
    ),
    ("store_memory", {"content": "x", "system": "long_term"}, "validation_failed", "thought"),
    ("store_memory", draft("x", system="forever"), "validation_failed", "system"),
    (
        "store_memory",
        draft("x", subject_id="nobody", scope="subject"),
        "validation_failed",
        "subject_id",
    ),
    ("store_memory", draft("   "), "validation_failed", "content"),
    ("store_memory", draft("x", metadata="tags"), "validation_failed", "metadata"),
    ("search_memories", {}, "validation_failed", "query"),
    ("search_memories", {"query": "   "}, "validation_failed", "query"),
    ("search_memories", {"query": "tea", "cursor": "not-a-cursor"}, "invalid_pagination", None),
    ("list_memories", {"limit": 1000}, "invalid_pagination", None),
    ("list_memories", {"cursor": "garbage"}, "invalid_pagination", None),
    ("list_memories", {"memory_scope": "everyone"}, "validation_failed", "memory_scope"),
    ("list_memories", {"status": "forgotten"}, "validation_failed", "status"),
    ("get_memory", {}, "validation_failed", "memory_id"),
    ("get_memory", {"memory_id": "not-an-id"}, "not_found", None),
    ("forget_everything", {}, "not_found", None),
]


def test_bad_arguments_are_tool_errors_a_model_can_read(actors: Actors) -> None:
    async def work(session: ClientSession) -> list[Any]:
        return [await session.call_tool(name, args) for name, args, _, _ in BAD_CALLS]

    results = over_http(actors.live.base_url, bearer(actors.a1["api_key"]), work)
    for (name, args, code, field), result in zip(BAD_CALLS, results, strict=True):
        error = refused(result, code)
        if field is not None:
            assert field in error.get("details", {}), (name, args, error)
    # The same store requests over REST give the same codes.
    with actors.rest(actors.a1["api_key"]) as rest:
        for name, args, code, _ in BAD_CALLS[:3]:
            assert name == "store_memory"
            assert rest_code(rest.post(AGENT_API, json={"memory": args})) == code


def initialize_message() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }


MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def test_bad_credentials_are_401_before_any_tool_runs(actors: Actors) -> None:
    url = f"{actors.live.base_url}/mcp"
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "store_memory", "arguments": draft("must never be stored")},
    }
    for headers in (
        {},
        {"X-API-Key": "mn_agent_not-a-key"},
        bearer("mn_user_not-a-key"),
        bearer("not.a.jwt"),
        {"Authorization": f"Basic {actors.a1['api_key']}"},
    ):
        for body in (initialize_message(), call):
            answer = httpx.post(url, json=body, headers={**MCP_HEADERS, **headers})
            assert answer.status_code == 401, answer.text
            assert answer.json()["error"]["code"] == "unauthorized"
            assert answer.headers["www-authenticate"].startswith("Bearer")
    with actors.rest(actors.a1["api_key"]) as rest:
        found = rest.get(AGENT_API, params={"content_query": "must never be stored"}).json()
        assert found["data"] == []
    # The official client fails to connect with a bad key.
    with pytest.raises(BaseException) as failed:
        over_http(actors.live.base_url, bearer("mn_agent_bad"), lambda s: s.list_tools())
    assert _contains(failed.value, MCPError)
    # A good key over raw HTTP: stateless JSON answers, no session to pin a worker.
    answer = httpx.post(
        url, json=initialize_message(), headers={**MCP_HEADERS, **bearer(actors.a1["api_key"])}
    )
    assert answer.status_code == 200
    assert answer.json()["result"]["serverInfo"]["name"] == "mnemos"
    assert "mcp-session-id" not in answer.headers


def _contains(exc: BaseException, kind: type[BaseException]) -> bool:
    if isinstance(exc, kind):
        return True
    return any(_contains(inner, kind) for inner in getattr(exc, "exceptions", ()))


def test_plan_off_is_plan_required(live: LiveServer) -> None:
    org = live.admin("create-org", "--name", "Off")["id"]
    user = live.admin("create-user", "--name", "Oz", "--email", "oz@off.test", "--org", org)
    agent = live.admin("create-agent", "--owner", user["id"], "--name", "Off agent")

    async def work(session: ClientSession) -> list[Any]:
        return [
            await session.call_tool("store_memory", draft("nothing")),
            await session.call_tool("search_memories", {"query": "nothing"}),
            await session.call_tool("list_memories", {}),
        ]

    before = over_http(live.base_url, bearer(agent["api_key"]), work)
    assert [r.is_error for r in before] == [False, False, False]
    live.admin("set-plan", "--org", org, "--memory", "off")
    for result in over_http(live.base_url, bearer(agent["api_key"]), work):
        refused(result, "plan_required")

    async def person(session: ClientSession) -> Any:
        return await session.call_tool("list_memories", {})

    refused(over_http(live.base_url, bearer(user["api_key"]), person), "plan_required")


AISLE = "The customer prefers aisle seats on long flights."
QUESTION = "where does the client like to sit on a plane?"  # no word in common with AISLE


def test_search_memories_finds_by_meaning_over_http_and_stdio(actors: Actors) -> None:
    key = actors.a2["api_key"]
    aisle = store(actors, actors.a2, content=AISLE)
    harbor = [
        store(actors, actors.a2, content=f"Harbor log entry {n}: the ferry left on time")["id"]
        for n in range(4)
    ]
    embedded(actors, key, aisle["id"], *harbor)  # pages are stable while the data is

    async def work(session: ClientSession) -> dict[str, Any]:
        first = ok(await session.call_tool("search_memories", {"query": QUESTION, "limit": 2}))
        rest = ok(
            await session.call_tool(
                "search_memories", {"query": QUESTION, "cursor": first["next_cursor"]}
            )
        )
        other = await session.call_tool(
            "search_memories", {"query": "ferry", "cursor": first["next_cursor"]}
        )
        return {"first": first, "rest": rest, "other": other}

    async def over_stdio() -> dict[str, Any]:
        async with stdio_session(actors.live.env, key) as session:
            return await work(session)

    for seen in (over_http(actors.live.base_url, bearer(key), work), asyncio.run(over_stdio())):
        first = [m["id"] for m in seen["first"]["memories"]]
        assert first[0] == aisle["id"]
        paged = first + [m["id"] for m in seen["rest"]["memories"]]
        assert len(paged) == len(set(paged)) >= 5  # every memory of a2 (20 at most), none twice
        assert paged == rest_search(actors, key, query=QUESTION, limit=len(paged))  # as REST
        error = refused(seen["other"], "invalid_pagination")
        assert error["details"] == {"cursor": "belongs to another search"}


# --- stdio: `mnemos mcp` ---------------------------------------------------------------------


def test_stdio_serves_the_same_tools(actors: Actors) -> None:
    env = actors.live.env

    async def run() -> dict[str, Any]:
        async with stdio_session(env, actors.a1["api_key"]) as session:
            tools = {
                t.name: sorted(t.input_schema.get("required", []))
                for t in (await session.list_tools()).tools
            }
            stored = ok(
                await session.call_tool("store_memory", draft("Stdio remembers the harbor"))
            )
            found = ok(await session.call_tool("search_memories", {"query": "harbor"}))
            got = ok(await session.call_tool("get_memory", {"memory_id": stored["id"]}))
            listed = ok(await session.call_tool("list_memories", {"content_query": "harbor"}))
            bad = await session.call_tool("store_memory", draft("x", system="sensory"))
            archived = ok(await session.call_tool("archive_memory", {"memory_id": stored["id"]}))
            superseded = ok(
                await session.call_tool("supersede_memory", {"memory_id": stored["id"]})
            )
        async with stdio_session(env, actors.ann_token) as session:
            person = {t.name for t in (await session.list_tools()).tools}
            mine = ok(await session.call_tool("list_memories", {"status": "all", "limit": 100}))
        return locals()

    seen = asyncio.run(run())
    assert seen["tools"] == AGENT_TOOLS
    assert set(seen["person"]) == set(PERSON_TOOLS)
    assert seen["found"]["memories"][0]["id"] == seen["stored"]["id"]
    assert seen["got"] == seen["stored"]
    assert seen["listed"]["memories"] == [seen["stored"]]
    refused(seen["bad"], "invalid_memory_type")
    assert seen["archived"]["status"] == "archived"
    assert seen["superseded"]["status"] == "superseded"
    assert seen["stored"]["id"] in {m["id"] for m in seen["mine"]["memories"]}
    with actors.rest(actors.a1["api_key"]) as rest:  # the server sees what stdio stored
        assert rest.get(f"{AGENT_API}/{seen['stored']['id']}").json()["data"] == seen["superseded"]


def _stdio_exchange(
    env: dict[str, str], credential: str, lines: list[dict[str, Any]]
) -> tuple[int, str, str]:
    """Send each message to `mnemos mcp`, waiting for the answer of each request (stdin stays
    open meanwhile: at its end the server stops); the exit status, stdout and stderr."""
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "mnemos", "mcp", "--log-level", "debug"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env={**env, "MNEMOS_API_KEY": credential},
        )
        assert process.stdin is not None and process.stdout is not None
        out: list[str] = []
        try:
            for line in lines:
                try:
                    process.stdin.write(json.dumps(line) + "\n")
                    process.stdin.flush()
                except BrokenPipeError:
                    break  # the server left
                if "id" not in line:
                    continue  # a notification: no answer
                ready, _, _ = select.select([process.stdout], [], [], 60)
                answer = process.stdout.readline() if ready else ""
                if not answer:
                    break
                out.append(answer)
            with contextlib.suppress(BrokenPipeError):
                process.stdin.close()
            status = process.wait(timeout=60)
            out.append(process.stdout.read())
        finally:
            if process.poll() is None:
                process.kill()
            process.stdout.close()
        errors.seek(0)
        return status, "".join(out), errors.read()


def test_stdio_stdout_carries_protocol_messages_only(actors: Actors) -> None:
    messages = [
        initialize_message(),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "store_memory", "arguments": draft("Stdout stays clean")},
        },
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "get_memory", "arguments": {}},
        },
    ]
    status, stdout, stderr = _stdio_exchange(actors.live.env, actors.a1["api_key"], messages)
    assert status == 0, stderr
    answers = [json.loads(line) for line in stdout.splitlines()]  # every line is JSON-RPC
    assert [a["id"] for a in answers] == [1, 2, 3, 4]
    assert all(a["jsonrpc"] == "2.0" for a in answers)
    assert answers[2]["result"]["structuredContent"]["content"] == "Stdout stays clean"
    assert answers[3]["result"]["isError"] is True
    # A bad key: nothing on stdout, the reason on stderr, a failing exit status.
    status, stdout, stderr = _stdio_exchange(actors.live.env, "mn_agent_wrong", messages)
    assert status == 1
    assert stdout == ""
    assert "unauthorized" in stderr


# --- several worker processes ---------------------------------------------------------------


@pytest.fixture(scope="module", params=BACKENDS)
def workers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("mcp-workers")
    databases = _database_for(request.param, tmp)
    server = start_server(next(databases), tmp, "--workers", "2")
    try:
        yield server
    finally:
        stop_server(server)
        databases.close()


def test_a_session_works_across_workers(workers: LiveServer) -> None:
    org = workers.admin("create-org", "--name", "W")["id"]
    user = workers.admin("create-user", "--name", "W", "--email", "w@w.test", "--org", org)
    agent = workers.admin("create-agent", "--owner", user["id"], "--name", "W")
    # Every request on a new connection: the kernel spreads them over both workers' sockets.
    headers = {**bearer(agent["api_key"]), "Connection": "close"}

    async def work(session: ClientSession) -> tuple[list[str], list[dict[str, Any]]]:
        ids = [
            ok(await session.call_tool("store_memory", draft(f"worker note {i}")))["id"]
            for i in range(12)
        ]
        got = [ok(await session.call_tool("get_memory", {"memory_id": i})) for i in ids]
        return ids, got

    async def run() -> tuple[list[str], list[dict[str, Any]]]:
        async with http_session(workers.base_url, headers) as session:
            return await work(session)

    ids, got = asyncio.run(run())
    assert [m["id"] for m in got] == ids


def test_the_2026_protocol_client(actors: Actors) -> None:
    """The SDK's high-level `Client` negotiates the 2026-07-28 protocol (no handshake)."""

    async def run() -> tuple[str | None, set[str], Any]:
        async with httpx2.AsyncClient(headers=bearer(actors.a1["api_key"])) as http:
            transport = streamable_http_client(f"{actors.live.base_url}/mcp", http_client=http)
            async with Client(transport) as client:
                version = client.session.protocol_version if client.session else None
                names = {tool.name for tool in (await client.list_tools()).tools}
                return version, names, await client.call_tool("get_memory", {"memory_id": "x"})

    version, names, missing = asyncio.run(run())
    assert version == "2026-07-28"
    assert names == set(AGENT_TOOLS)
    refused(missing, "not_found")


SNIPPET = re.compile(r"<!-- snippet: python-client -->\n```python\n(.*?)```", re.S)


def test_the_documented_python_snippet_runs(actors: Actors, tmp_path: Path) -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "mcp.md").read_text()
    match = SNIPPET.search(docs)
    assert match is not None
    code = match.group(1)
    code = code.replace("http://127.0.0.1:8000/mcp", f"{actors.live.base_url}/mcp")
    code = code.replace('"mn_agent_..."', json.dumps(actors.b1["api_key"]))
    script = tmp_path / "snippet.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Every retry loop has a maximum attempt count.\n"
