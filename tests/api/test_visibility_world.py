"""Every actor, every memory, both Band APIs, against a reference model written from docs/design.md.

The world: three organizations with two people each, one person with none, two agents per
person, shared and private rooms, and memories of every scope (some in rooms, some about people
of other organizations). The reference model below is deliberately written apart from
`mnemos.domain` so that a rule broken there shows up as a difference here.
"""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from mnemos.domain.accounts import hash_key
from mnemos.domain.memories import AgentListParams, MemoryService
from mnemos.domain.pagination import CursorCodec
from mnemos.domain.queries import ALL_STATUSES, Filters
from mnemos.domain.recall import SearchMode
from mnemos.domain.search import parse_search
from tests.api.test_band_human import room
from tests.reference import M, Model
from tests.world import Actor, World, memory_body

AGENT = "/api/v1/agent/memories"
HUMAN = "/api/v1/me/memories"


def build(client: TestClient, world: World) -> tuple[list[Actor], list[Actor], Model]:
    people = [world.user(f"P{o}{i}", f"org{o}") for o in range(3) for i in range(2)] + [
        world.user("Lonely")
    ]
    agents = [world.agent(p, f"{p.id[:4]}-{k}") for p in people for k in range(2)]
    owner = {a.id: a.owner_id or "" for a in agents}
    org_of: dict[str, str | None] = {x.id: x.organization_id for x in people + agents}
    rooms_of: dict[str, set[str]] = {x.id: set() for x in people + agents}

    def join(room_id: str, *members: Actor) -> None:
        for member in members:
            rooms_of[member.id].add(room_id)

    for o in range(3):
        p0, p1 = people[2 * o], people[2 * o + 1]
        mine = [a for a in agents if a.owner_id in (p0.id, p1.id)]
        shared = room(client, mine[0], p0, p1, mine[2], title=f"shared {o}")
        join(shared, mine[0], p0, p1, mine[2])
        for person, bot in ((p0, mine[1]), (p1, mine[3])):
            private = room(client, bot, person, title=f"private {person.id[:4]}")
            join(private, bot, person)
    lonely, lonely_bots = people[-1], agents[-2:]
    solo_room = room(client, lonely_bots[0], lonely, title="solo")
    join(solo_room, lonely_bots[0], lonely)

    memories: list[M] = []

    def put(
        agent: Actor, scope: str, subject: str | None = None, room_id: str | None = None
    ) -> None:
        fields: dict[str, Any] = {"scope": scope}
        if subject:
            fields["subject_id"] = subject
        if room_id:
            fields["chat_room_id"] = room_id
        response = client.post(
            AGENT, json=memory_body(f"{scope} by {agent.id[:6]}", **fields), headers=agent.headers
        )
        assert response.status_code == 201, response.text
        row = response.json()["data"]
        memories.append(M(row["id"], scope, agent.id, row["organization_id"], subject, room_id))

    for agent in agents:
        my_rooms = sorted(rooms_of[agent.id])
        put(agent, "agent")
        for room_id in my_rooms:
            put(agent, "agent", room_id=room_id)
            put(agent, "subject", subject=agent.owner_id, room_id=room_id)
            if agent.organization_id:
                put(agent, "organization", room_id=room_id)
        if agent.organization_id:
            put(agent, "organization")
        for person in people:  # about everyone, including people of other organizations
            if person.organization_id == agent.organization_id or person is lonely:
                put(agent, "subject", subject=person.id)
        put(
            agent,
            "subject",
            subject=people[
                (people.index(next(p for p in people if p.id == agent.owner_id)) + 2) % 6
            ].id,
        )
    return people, agents, Model(owner, org_of, rooms_of, memories)


def walk(client: TestClient, url: str, headers: dict[str, str], **params: Any) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        query = {**params, "limit": 100, "status": "all", **({"cursor": cursor} if cursor else {})}
        response = client.get(url, params=query, headers=headers)
        assert response.status_code == 200, response.text
        body = response.json()
        ids += [row["id"] for row in body["data"]]
        cursor = body["meta"]["next_cursor"]
        if cursor is None:
            assert len(ids) == len(set(ids))
            return ids


def test_every_actor_sees_exactly_what_design_says(client: TestClient, world: World) -> None:
    people, agents, model = build(client, world)
    by_id = {m.id: m for m in model.memories}
    differences: list[str] = []

    def compare(label: str, got: list[str], expected: set[str]) -> None:
        if set(got) != expected:
            differences.append(
                f"{label}: extra {set(got) - expected}, missing {expected - set(got)}"
            )

    subjects = [p.id for p in people]
    for agent in agents:
        org = agent.organization_id
        for scope in (None, "all", "agent", "subject", "organization"):
            params = {"scope": scope} if scope else {}
            compare(
                f"agent me {scope}",
                walk(client, AGENT, agent.headers, **params),
                model.agent_list(agent.id, "me", scope, None),
            )
        compare(
            "agent me subject",
            walk(client, AGENT, agent.headers, subject_id=subjects[0]),
            model.agent_list(agent.id, "me", None, subjects[0]),
        )
        if org is None:
            response = client.get(AGENT, params={"memory_scope": "org"}, headers=agent.headers)
            assert response.json()["error"]["code"] == "org_scope_requires_organization"
            continue
        for scope in (None, "organization", "agent", "all"):
            params = {"memory_scope": "org", **({"scope": scope} if scope else {})}
            compare(
                f"agent org {scope}",
                walk(client, AGENT, agent.headers, **params),
                model.agent_list(agent.id, "org", scope, None),
            )
        for subject in subjects:
            for scope in ("subject", "all"):
                got = walk(
                    client,
                    AGENT,
                    agent.headers,
                    memory_scope="org",
                    scope=scope,
                    subject_id=subject,
                )
                compare(
                    f"agent org {scope} {subject}",
                    got,
                    model.agent_list(agent.id, "org", scope, subject),
                )

    for person in people:
        for scope in ("about_me", "organization", "room", "all"):
            expected = {m.id for m in model.memories if model.human_sees(person.id, m, scope)}
            compare(f"human {scope}", walk(client, HUMAN, person.headers, scope=scope), expected)
        for room_id in model.rooms_of[person.id]:
            expected = {
                m.id
                for m in model.memories
                if m.room == room_id and model.human_sees(person.id, m, "room")
            }
            compare(
                "human room filter",
                walk(client, HUMAN, person.headers, scope="room", chat_room_id=room_id),
                expected,
            )

    for m in model.memories:
        for agent in agents:
            got = client.get(f"{AGENT}/{m.id}", headers=agent.headers).status_code
            if got != (200 if model.agent_reads(agent.id, m) else 404):
                differences.append(f"agent get {m.id} by {agent.id}: {got}")
        for person in people:
            got = client.get(f"{HUMAN}/{m.id}", headers=person.headers).status_code
            if got != (200 if model.human_sees(person.id, by_id[m.id]) else 403):
                differences.append(f"human get {m.id} by {person.id}: {got}")

    for m in model.memories:
        for agent in agents:
            want = (
                404
                if not model.agent_reads(agent.id, m)
                else (200 if model.agent_may_change(agent.id, m) else 403)
            )
            got = client.post(f"{AGENT}/{m.id}/archive", headers=agent.headers).status_code
            if got != want:
                differences.append(f"agent archive {m.id} by {agent.id}: {got} != {want}")
        for person in people:
            want = (
                200
                if model.human_sees(person.id, m) and model.human_may_change(person.id, m)
                else 403
            )
            got = client.post(f"{HUMAN}/{m.id}/supersede", headers=person.headers).status_code
            if got != want:
                differences.append(f"human supersede {m.id} by {person.id}: {got} != {want}")
    assert differences == []
    assert len(model.memories) > 100


def test_ranked_search_sees_what_the_list_sees(client: TestClient, world: World) -> None:
    """Keyword search ranks the same memories the newest-first list returns (every memory's
    content holds the word "by"), across the pages of its cursor."""
    _, agents, model = build(client, world)
    service = MemoryService(world.store, CursorCodec(b"k" * 32))
    every = Filters(statuses=ALL_STATUSES, search=parse_search("by", 100))
    for agent in agents:
        ctx = world.store.agent_by_key(hash_key(agent.api_key))
        assert ctx is not None
        lists = [("me", None), ("me", "agent")]
        if agent.organization_id:
            lists += [("org", None), ("org", "all")]
        for memory_scope, scope in lists:
            params = AgentListParams(memory_scope=memory_scope, scope=scope)
            ids: list[str] = []
            cursor = None
            while True:
                page = service.recall_as_agent(
                    ctx, params, every, "by", SearchMode.KEYWORD, 7, cursor
                )
                ids += [str(ranked.memory.id) for ranked in page.items]
                cursor = page.meta["next_cursor"]
                if cursor is None:
                    break
            assert len(ids) == len(set(ids))
            assert set(ids) == model.agent_list(agent.id, memory_scope, scope, None)
