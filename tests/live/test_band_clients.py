"""The unmodified `band-client-rest` and `band-sdk` memory tools against a live server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from band.core.exceptions import BandToolError
from band.runtime.tools.agent import AgentTools
from band_rest import AsyncRestClient, RestClient
from band_rest.errors import (
    ForbiddenError,
    NotFoundError,
    UnauthorizedError,
    UnprocessableEntityError,
)
from band_rest.types import AgentMemoryCreateRequest

from tests.live.conftest import LiveServer


@pytest.fixture(scope="module")
def people(live: LiveServer) -> dict[str, dict[str, Any]]:
    """The README's bootstrap: organizations, people and agents made with the admin CLI."""
    acme = live.admin("create-org", "--name", "Acme")["id"]
    globex = live.admin("create-org", "--name", "Globex")["id"]
    ann = live.admin("create-user", "--name", "Ann", "--email", "ann@acme.test", "--org", acme)
    bob = live.admin("create-user", "--name", "Bob", "--email", "bob@acme.test", "--org", acme)
    eve = live.admin("create-user", "--name", "Eve", "--email", "eve@globex.test", "--org", globex)
    lou = live.admin("create-user", "--name", "Lou", "--email", "lou@nowhere.test")
    assert live.admin("set-plan", "--org", acme, "--memory", "on") == {"ok": True}
    agents = {
        "reviewer": live.admin("create-agent", "--owner", ann["id"], "--name", "Reviewer Agent"),
        "coder": live.admin("create-agent", "--owner", bob["id"], "--name", "Coder Agent"),
        "spy": live.admin("create-agent", "--owner", eve["id"], "--name", "Spy"),
        "solo": live.admin("create-agent", "--owner", lou["id"], "--name", "Solo"),
    }
    return {"ann": ann, "bob": bob, **agents}


def rest(live: LiveServer, who: dict[str, Any]) -> RestClient:
    return RestClient(api_key=who["api_key"], base_url=live.base_url)


def create(client: RestClient, content: str, **fields: Any) -> Any:
    values = {
        "content": content,
        "system": "long_term",
        "type": "procedural",
        "segment": "guideline",
        "thought": "team review guideline",
        **fields,
    }
    response = client.agent_api_memories.create_agent_memory(
        memory=AgentMemoryCreateRequest(**values)
    )
    assert response.data is not None
    return response.data


def test_seed_flow_store_and_recall_guidelines(live: LiveServer, people: dict[str, Any]) -> None:
    reviewer = rest(live, people["reviewer"])
    me = reviewer.agent_api_identity.get_agent_me().data
    assert me is not None and me.id == people["reviewer"]["id"] and me.name == "Reviewer Agent"
    guidelines = [
        "Every retry loop has a maximum attempt count.",
        "Backoff delays include random jitter.",
        "Each retry is logged with its attempt number.",
    ]
    stored = [create(reviewer, text, scope="agent") for text in guidelines]
    assert all(m.scope == "agent" and m.organization_id is None for m in stored)
    recalled = reviewer.agent_api_memories.list_agent_memories(segment="guideline")
    assert [m.content for m in recalled.data or []] == list(reversed(guidelines))
    assert recalled.meta is not None and recalled.meta.has_more is False
    found = reviewer.agent_api_memories.list_agent_memories(content_query="jitter backoff")
    assert [m.content for m in found.data or []] == [guidelines[1]]
    one = reviewer.agent_api_memories.get_agent_memory(id=stored[0].id).data
    assert (
        one is not None and one.content == guidelines[0] and one.thought == "team review guideline"
    )
    coder = rest(live, people["coder"])
    assert coder.agent_api_memories.list_agent_memories(segment="guideline").data == []
    with pytest.raises(NotFoundError):
        coder.agent_api_memories.get_agent_memory(id=stored[0].id)


def test_subject_and_org_memories_through_the_client(
    live: LiveServer, people: dict[str, Any]
) -> None:
    reviewer, coder, spy = (rest(live, people[n]) for n in ("reviewer", "coder", "spy"))
    ann = people["ann"]["id"]
    suv = create(
        reviewer, "Ann prefers SUV rentals", type="semantic", segment="user", subject_id=ann
    )
    assert suv.scope == "subject"
    shared = create(reviewer, "Deploys happen on Tuesdays", scope="organization", type="semantic")
    about = coder.agent_api_memories.list_agent_memories(
        memory_scope="org", scope="subject", subject_id=ann, content_query="prefers SUV"
    )
    assert [m.id for m in about.data or []] == [suv.id]
    org = coder.agent_api_memories.list_agent_memories(memory_scope="org")
    assert shared.id in [m.id for m in org.data or []]
    assert suv.id not in [m.id for m in org.data or []]
    assert spy.agent_api_memories.list_agent_memories(memory_scope="org", scope="all").data == []
    with pytest.raises(NotFoundError):
        spy.agent_api_memories.get_agent_memory(id=shared.id)
    with pytest.raises(ForbiddenError) as forbidden:
        coder.agent_api_memories.supersede_agent_memory(id=shared.id)
    assert forbidden.value.body.error.code == "forbidden"
    archived = reviewer.agent_api_memories.archive_agent_memory(id=shared.id).data
    assert archived is not None and archived.status == "archived"
    assert shared.id not in [
        m.id for m in coder.agent_api_memories.list_agent_memories(memory_scope="org").data or []
    ]
    superseded = reviewer.agent_api_memories.supersede_agent_memory(id=suv.id).data
    assert superseded is not None and superseded.status == "superseded"


def test_errors_reach_the_client_in_its_shape(live: LiveServer, people: dict[str, Any]) -> None:
    solo = rest(live, people["solo"])
    with pytest.raises(UnprocessableEntityError) as refused:
        create(solo, "org-wide", scope="organization")
    assert refused.value.body["error"]["code"] == "org_scope_requires_organization"
    with pytest.raises(UnprocessableEntityError) as subject:
        create(solo, "x", scope="agent", subject_id=people["ann"]["id"])
    assert subject.value.body["error"]["code"] == "subject_id_requires_subject_scope"
    with pytest.raises(UnauthorizedError):
        RestClient(
            api_key="mn_agent_wrong", base_url=live.base_url
        ).agent_api_memories.list_agent_memories()
    with pytest.raises(UnauthorizedError):
        RestClient(
            api_key=people["ann"]["api_key"], base_url=live.base_url
        ).agent_api_memories.list_agent_memories()


def test_pagination_across_pages_with_the_client(live: LiveServer, people: dict[str, Any]) -> None:
    coder = rest(live, people["coder"])
    contents = [f"page note {i:03d}" for i in range(47)]
    for text in contents:
        create(coder, text, scope="agent", segment="tool")
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = coder.agent_api_memories.list_agent_memories(segment="tool", limit=10, cursor=cursor)
        seen += [m.content for m in page.data or []]
        pages += 1
        assert page.meta is not None and page.metadata is not None
        assert page.meta.next_cursor == page.metadata.next_cursor
        cursor = page.meta.next_cursor
        if cursor is None:
            break
    assert pages == 5
    assert seen == list(reversed(contents))
    offset_seen: list[str] = []
    for number in range(1, 5):
        page = coder.agent_api_memories.list_agent_memories(
            segment="tool", page=number, page_size=15
        )
        assert page.meta is not None and page.meta.total_count == 47 and page.meta.total_pages == 4
        offset_seen += [m.content for m in page.data or []]
    assert offset_seen == seen
    with pytest.raises(UnprocessableEntityError) as mixed:
        coder.agent_api_memories.list_agent_memories(limit=10, page=2)
    assert mixed.value.body["error"]["code"] == "invalid_pagination"


def test_band_sdk_memory_tools(live: LiveServer, people: dict[str, Any]) -> None:
    async def scenario() -> None:
        client = AsyncRestClient(api_key=people["reviewer"]["api_key"], base_url=live.base_url)
        tools = AgentTools("room-1", client, agent_id=people["reviewer"]["id"])
        stored = await tools.execute_tool_call(
            "band_store_memory",
            {
                "content": "Prefer small pull requests",
                "system": "long_term",
                "type": "procedural",
                "segment": "guideline",
                "scope": "agent",
                "thought": "the person asked for it",
            },
        )
        assert isinstance(stored, dict) and stored["content"] == "Prefer small pull requests"
        listed = await tools.execute_tool_call(
            "band_list_memories", {"segment": "guideline", "content_query": "small pull"}
        )
        assert [m["id"] for m in listed["data"]] == [stored["id"]]
        assert listed["meta"]["total_count"] == 1  # the SDK pages with page_size
        got = await tools.execute_tool_call("band_get_memory", {"memory_id": stored["id"]})
        assert got["id"] == stored["id"]
        working = await tools.store_memory(
            "Reviewing PR 42", "working", "procedural", "agent", "in progress", "agent"
        )
        assert working.type == "procedural"
        archived = await tools.execute_tool_call("band_archive_memory", {"memory_id": stored["id"]})
        assert archived["status"] == "archived"
        superseded = await tools.execute_tool_call(
            "band_supersede_memory", {"memory_id": working.id}
        )
        assert superseded["status"] == "superseded"
        remaining = await tools.list_memories(segment="guideline", content_query="small pull")
        assert remaining.data == []
        solo = AgentTools(
            "room-2", AsyncRestClient(api_key=people["solo"]["api_key"], base_url=live.base_url)
        )
        with pytest.raises(BandToolError, match="does not belong to an organization"):
            await solo.store_memory("x", "long_term", "semantic", "user", "t", "organization")

    asyncio.run(scenario())
