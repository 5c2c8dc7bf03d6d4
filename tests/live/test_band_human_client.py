"""The unmodified `band-client-rest` human API against a live server."""

from __future__ import annotations

from typing import Any

import pytest
from band_rest import RestClient
from band_rest.errors import ForbiddenError, NotFoundError, UnauthorizedError
from band_rest.human_api_chats.types import CreateMyChatRoomRequestChat
from band_rest.types import (
    AgentMemoryCreateRequest,
    AgentRegisterRequest,
    ChatRoomRequest,
    ParticipantRequest,
)

from tests.live.conftest import LiveServer


@pytest.fixture(scope="module")
def crew(live: LiveServer) -> dict[str, Any]:
    org = live.admin("create-org", "--name", "Humans")["id"]
    ann = live.admin("create-user", "--name", "Ann Lee", "--email", "ann@humans.test", "--org", org)
    bob = live.admin("create-user", "--name", "Bob", "--email", "bob@humans.test", "--org", org)
    bot = live.admin("create-agent", "--owner", bob["id"], "--name", "Bob Bot")
    token = live.admin("create-token", "--user", ann["id"], "--ttl", "600")["token"]
    return {"ann": ann, "bob": bob, "bot": bot, "token": token}


def client(live: LiveServer, key: str) -> RestClient:
    return RestClient(api_key=key, base_url=live.base_url)


def remember(bot: RestClient, content: str, **fields: Any) -> Any:
    memory = AgentMemoryCreateRequest(
        content=content, system="long_term", type="semantic", segment="user", thought="t", **fields
    )
    data = bot.agent_api_memories.create_agent_memory(memory=memory).data
    assert data is not None
    return data


def test_people_see_correct_and_delete_what_agents_remember(
    live: LiveServer, crew: dict[str, Any]
) -> None:
    ann = client(live, crew["ann"]["api_key"])
    bot = client(live, crew["bot"]["api_key"])
    room = bot.agent_api_chats.create_agent_chat(chat=ChatRoomRequest(title="Trip planning")).data
    bot.agent_api_participants.add_agent_chat_participant(
        room.id, participant=ParticipantRequest(participant_id=crew["ann"]["id"])
    )
    about = remember(
        bot, "Ann prefers SUV rentals", subject_id=crew["ann"]["id"], chat_room_id=room.id
    )
    shared = remember(bot, "Office closes at six", scope="organization")
    private = remember(bot, "Bob's bot private note")

    page = ann.human_api_memories.list_user_memories(scope="about_me", content_query="prefers SUV")
    assert [m.id for m in page.data or []] == [about.id]
    row = (page.data or [])[0]
    assert (row.subject_name, row.subject_type, row.source_agent_name) == (
        "Ann Lee",
        "user",
        "Bob Bot",
    )
    assert (row.chat_room_title, row.chat_room_type) == ("Trip planning", "group")
    everything = ann.human_api_memories.list_user_memories()
    assert {m.id for m in everything.data or []} == {about.id, shared.id}
    room_only = ann.human_api_memories.list_user_memories(scope="room", chat_room_id=room.id)
    assert [m.id for m in room_only.data or []] == [about.id]

    with pytest.raises(ForbiddenError):
        ann.human_api_memories.get_user_memory(private.id)
    with pytest.raises(ForbiddenError):
        ann.human_api_memories.archive_user_memory(shared.id)
    archived = ann.human_api_memories.archive_user_memory(about.id).data
    assert archived is not None and archived.status == "archived"
    restored = ann.human_api_memories.restore_user_memory(about.id).data
    assert restored is not None and restored.status == "active"
    superseded = ann.human_api_memories.supersede_user_memory(about.id).data
    assert superseded is not None and superseded.status == "superseded"
    ann.human_api_memories.delete_user_memory(about.id)
    with pytest.raises(NotFoundError):
        ann.human_api_memories.get_user_memory(about.id)
    with pytest.raises(NotFoundError):
        bot.agent_api_memories.get_agent_memory(id=about.id)


def test_profile_agents_rooms_and_tokens(live: LiveServer, crew: dict[str, Any]) -> None:
    bob = client(live, crew["bob"]["api_key"])
    profile = bob.human_api_profile.get_my_profile().data
    assert profile.id == crew["bob"]["id"] and profile.email == "bob@humans.test"
    registered = bob.human_api_agents.register_my_agent(
        agent=AgentRegisterRequest(name="Helper", description="helps")
    ).data
    helper = client(live, registered.credentials.api_key)
    assert helper.agent_api_identity.get_agent_me().data.name == "Helper"
    names = [a.name for a in bob.human_api_agents.list_my_agents().data]
    assert names == ["Bob Bot", "Helper"]
    kept = remember(helper, "Helper shared fact", scope="organization")
    bob.human_api_agents.delete_my_agent(registered.agent.id)
    with pytest.raises(UnauthorizedError):
        helper.agent_api_identity.get_agent_me()
    fact = bob.human_api_memories.get_user_memory(kept.id).data
    assert fact.source_agent_id is None

    room = bob.human_api_chats.create_my_chat_room(
        chat=CreateMyChatRoomRequestChat(title="Standup")
    ).data
    bob.human_api_participants.add_my_chat_participant(
        room.id, participant=ParticipantRequest(participant_id=crew["ann"]["id"])
    )
    members = bob.human_api_participants.list_my_chat_participants(room.id).data
    assert sorted(p.name for p in members) == ["Ann Lee", "Bob"]
    assert bob.human_api_chats.get_my_chat_room(room.id).data.title == "Standup"

    by_token = RestClient(
        api_key="", base_url=live.base_url, headers={"Authorization": f"Bearer {crew['token']}"}
    )
    assert by_token.human_api_profile.get_my_profile().data.id == crew["ann"]["id"]
    with pytest.raises(UnauthorizedError):
        client(live, crew["bot"]["api_key"]).human_api_memories.list_user_memories()
