"""Random worlds, every actor's view through every API, against the reference model.

A hypothesis state machine builds organizations, people, agents, rooms and memories of every
scope and status, Tuya device memories, and deletions of agents and memories; after every step
it checks each agent's Band lists, each person's Band list, each person's Superagent view of
each agent, and each project's Tuya view of each device, against `tests/reference.py`.

CI runs a bounded number of examples; `MNEMOS_STATEFUL_EXAMPLES=500` runs more.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, precondition, rule

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain import accounts
from mnemos.embedding import load_embedder
from mnemos.indexer import drain
from mnemos.storage import migrate, open_store
from tests.reference import M, Model
from tests.world import memory_body

EXAMPLES = int(os.environ.get("MNEMOS_STATEFUL_EXAMPLES", "12"))
TEMPLATE = Path(tempfile.mkdtemp(prefix="mnemos-stateful-")) / "template.db"
migrate(Settings(database_url=f"sqlite:///{TEMPLATE}"))
AGENT = "/api/v1/agent/memories"
HUMAN = "/api/v1/me/memories"
DEVICES = ["dev-a", "dev-b"]
KEYS = ["sys.memoryAge", "sys.memoryInterests"]
EMBEDDER = load_embedder("local")
QUERIES = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=60).filter(
    str.strip
)


def tuya_headers(
    project: dict[str, str], token: str, method: str, path: str, query: dict[str, Any], body: bytes
) -> dict[str, str]:
    """Sign as the official connector does (tests/live/test_tuya.py uses the real one)."""
    t = str(int(time.time() * 1000))
    # Tuya's optional nonce: a repeated identical request in one millisecond is not a replay.
    nonce = uuid.uuid4().hex
    url = path + ("?" + "&".join(f"{k}={query[k]}" for k in sorted(query)) if query else "")
    digest = hashlib.sha256(body).hexdigest()
    message = project["client_id"] + token + t + nonce + f"{method}\n{digest}\n\n{url}"
    sign = (
        hmac.new(project["client_secret"].encode(), message.encode(), hashlib.sha256)
        .hexdigest()
        .upper()
    )
    return {
        "client_id": project["client_id"],
        "access_token": token,
        "t": t,
        "nonce": nonce,
        "sign": sign,
    }


class Worlds(RuleBasedStateMachine):
    orgs = Bundle("orgs")
    people = Bundle("people")
    agents = Bundle("agents")

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="mnemos-world-"))
        shutil.copy(TEMPLATE, self.tmp / "m.db")
        self.settings = Settings(
            database_url=f"sqlite:///{self.tmp / 'm.db'}",
            rate_limit_per_minute=0,
            sqlite_synchronous="OFF",
        )
        self.store = open_store(self.settings)
        self.client = TestClient(create_app(self.settings, self.store, EMBEDDER))
        self.client.__enter__()
        self.model = Model()
        self.keys: dict[str, str] = {}
        self.people_list: list[str] = []
        self.agent_list: list[str] = []
        self.projects: dict[str, dict[str, str]] = {}
        self.tokens: dict[str, str] = {}
        self.device_owner: dict[str, str] = {}
        self.n = 0

    def teardown(self) -> None:
        self.client.__exit__(None, None, None)
        self.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def unique(self, text: str) -> str:
        self.n += 1
        return f"{text} n{self.n}"

    # --- building ---------------------------------------------------------------------

    @precondition(lambda self: len(self.projects) < 3)
    @rule(target=orgs)
    def new_org(self) -> str:
        org = str(accounts.create_organization(self.store, f"Org{len(self.projects)}").id)
        client_id, secret = f"cid{uuid.uuid4().hex[:12]}", uuid.uuid4().hex
        self.store.create_tuya_project(client_id, secret, uuid.UUID(org))
        self.projects[org] = {"client_id": client_id, "client_secret": secret}
        return org

    @precondition(lambda self: len(self.people_list) < 5)
    @rule(target=people, org=st.one_of(st.none(), orgs))
    def new_person(self, org: str | None) -> str:
        issued = accounts.create_user(
            self.store, "P", f"p{uuid.uuid4().hex[:8]}@w.test", uuid.UUID(org) if org else None
        )
        person = str(issued.user.id)
        self.keys[person] = issued.api_key
        self.model.org_of[person] = org
        self.people_list.append(person)
        return person

    @precondition(lambda self: len(self.agent_list) < 6)
    @rule(target=agents, owner=people)
    def new_agent(self, owner: str) -> str:
        issued = accounts.create_agent(self.store, uuid.UUID(owner), "A", None)
        agent = str(issued.agent.id)
        self.keys[agent] = issued.api_key
        self.model.owner[agent] = owner
        self.model.org_of[agent] = self.model.org_of[owner]
        self.agent_list.append(agent)
        return agent

    def _headers(self, who: str) -> dict[str, str]:
        return {"X-API-Key": self.keys[who]}

    @rule(agent=agents, with_owner=st.booleans(), others=st.lists(people, max_size=2))
    def new_room(self, agent: str, with_owner: bool, others: list[str]) -> None:
        if agent not in self.model.owner:
            return
        made = self.client.post(
            "/api/v1/agent/chats", json={"chat": {"title": "r"}}, headers=self._headers(agent)
        )
        assert made.status_code == 201
        room = made.json()["data"]["id"]
        self.model.rooms_of.setdefault(agent, set()).add(room)
        org = self.model.org_of[agent]
        for person in ({self.model.owner[agent]} if with_owner else set()) | set(others):
            addable = person == self.model.owner[agent] or (
                org is not None and self.model.org_of[person] == org
            )
            response = self.client.post(
                f"/api/v1/agent/chats/{room}/participants",
                json={"participant": {"participant_id": person}},
                headers=self._headers(agent),
            )
            assert response.status_code == (201 if addable else 404), response.text
            if addable:
                self.model.rooms_of.setdefault(person, set()).add(room)

    @rule(
        agent=agents,
        scope=st.sampled_from(["agent", "subject", "organization"]),
        about=people,
        in_room=st.booleans(),
    )
    def store(self, agent: str, scope: str, about: str, in_room: bool) -> None:
        if agent not in self.model.owner:
            assert (
                self.client.post(
                    AGENT, json=memory_body("x"), headers=self._headers(agent)
                ).status_code
                == 401
            )
            return
        rooms = sorted(self.model.rooms_of.get(agent, set()))
        room = rooms[0] if in_room and rooms else None
        fields: dict[str, Any] = {"scope": scope}
        if scope == "subject":
            fields["subject_id"] = about
        if room:
            fields["chat_room_id"] = room
        content = self.unique(f"{scope} by {agent[:4]}")
        response = self.client.post(
            AGENT, json=memory_body(content, **fields), headers=self._headers(agent)
        )
        org = self.model.org_of[agent]
        if scope == "organization" and org is None:
            assert response.json()["error"]["code"] == "org_scope_requires_organization"
            return
        assert response.status_code == 201, response.text
        data = response.json()["data"]
        assert data["organization_id"] == (None if scope == "agent" else org)
        self.model.memories.append(
            M(
                data["id"],
                scope,
                agent,
                data["organization_id"],
                fields.get("subject_id"),
                room,
                content=content,
                history=[("created", "agent", agent)],
            )
        )

    # --- changing ---------------------------------------------------------------------

    def _pick(self, index: int) -> M | None:
        known = [m for m in self.model.memories if m.tuya is None]
        return known[index % len(known)] if known else None

    @rule(
        agent=agents, index=st.integers(0, 10_000), action=st.sampled_from(["supersede", "archive"])
    )
    def agent_changes(self, agent: str, index: int, action: str) -> None:
        m = self._pick(index)
        if m is None or agent not in self.model.owner:
            return
        response = self.client.post(f"{AGENT}/{m.id}/{action}", headers=self._headers(agent))
        want = (
            404
            if not self.model.agent_reads(agent, m)
            else (200 if self.model.agent_may_change(agent, m) else 403)
        )
        assert response.status_code == want, (response.text, m)
        if want == 200:
            status = "superseded" if action == "supersede" else "archived"
            if m.status != status:  # a change to the status it has records nothing
                m.status = status
                m.history.append((m.status, "agent", agent))

    @rule(
        person=people,
        index=st.integers(0, 10_000),
        action=st.sampled_from(["supersede", "archive", "restore", "delete"]),
    )
    def person_changes(self, person: str, index: int, action: str) -> None:
        m = self._pick(index)
        if m is None:
            return
        url = f"{HUMAN}/{m.id}"
        response = (
            self.client.delete(url, headers=self._headers(person))
            if action == "delete"
            else self.client.post(f"{url}/{action}", headers=self._headers(person))
        )
        if not (self.model.human_sees(person, m) and self.model.human_may_change(person, m)):
            assert response.status_code == 403, (response.text, m)
        elif action == "restore" and m.status != "archived":
            assert response.json()["error"]["code"] == "memory_not_archived"
        elif action == "delete":
            assert response.status_code == 204
            self.model.memories.remove(m)
        else:
            assert response.status_code == 200, response.text
            status = {"supersede": "superseded", "archive": "archived", "restore": "active"}[action]
            if m.status != status:  # a change to the status it has records nothing
                m.status = status
                event = {"supersede": "superseded", "archive": "archived", "restore": "restored"}
                m.history.append((event[action], "user", person))

    @rule(person=people)
    def erase(self, person: str) -> None:
        response = self.client.post(
            f"{HUMAN}/erase", json={"confirm": True}, headers=self._headers(person)
        )
        assert response.status_code == 200, response.text
        about = [m for m in self.model.memories if m.subject == person]
        assert response.json()["data"]["erased"] == len(about)
        self.model.memories = [m for m in self.model.memories if m.subject != person]

    @rule(person=people, agent=agents)
    def delete_agent(self, person: str, agent: str) -> None:
        response = self.client.delete(f"/api/v1/me/agents/{agent}", headers=self._headers(person))
        if self.model.owner.get(agent) == person:
            assert response.status_code == 200
            self.model.delete_agent(agent)
            self.agent_list.remove(agent)
        else:
            assert response.status_code == 404

    # --- Tuya -------------------------------------------------------------------------

    def _tuya(
        self,
        org: str,
        method: str,
        device: str,
        query: dict[str, Any],
        body: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        project = self.projects[org]
        if org not in self.tokens:
            path = "/v1.0/token"
            got = self.client.get(
                path,
                params={"grant_type": 1},
                headers=tuya_headers(project, "", "GET", path, {"grant_type": 1}, b""),
            )
            self.tokens[org] = got.json()["result"]["access_token"]
        path = f"/v1.0/cloud/agent/ai/chat/b/devices/{device}/memories"
        raw = json.dumps(body).encode() if body else b""
        headers = tuya_headers(project, self.tokens[org], method, path, query, raw)
        response = self.client.request(
            method,
            path,
            params=query,
            content=raw or None,
            headers={**headers, "content-type": "application/json"},
        )
        assert response.status_code == 200
        result: dict[str, Any] = response.json()
        return result

    def _role(self, org: str, choice: int) -> str | None:
        roles = [a for a in self.agent_list if self.model.org_of[a] == org]
        return roles[choice % len(roles)] if roles and choice % 3 else None

    @rule(
        org=orgs,
        device=st.sampled_from(DEVICES),
        key=st.sampled_from(KEYS),
        role_choice=st.integers(0, 9),
        role_scope=st.booleans(),
    )
    def tuya_write(
        self, org: str, device: str, key: str, role_choice: int, role_scope: bool
    ) -> None:
        role = self._role(org, role_choice)
        scope = 3 if role and role_scope else 1
        value = self.unique(f"{key} value")
        binding = {"bind_role_type": 0, "role_id": role} if role else {"bind_role_type": 2}
        entry = {
            "memory_key": key,
            "memory_name": key,
            "memory_value": value,
            "effective_scope": scope,
        }
        answer = self._tuya(org, "POST", device, {}, {**binding, "memory_list": [entry]})
        owner = self.device_owner.setdefault(device, org)
        if owner != org:
            assert answer["code"] == 1106
            return
        assert answer["success"] is True, answer
        self.model.tuya_write(org, device, key, value, scope, role)

    @rule(
        org=orgs,
        device=st.sampled_from(DEVICES),
        keys=st.one_of(st.none(), st.sets(st.sampled_from(KEYS), min_size=1)),
        role_choice=st.integers(0, 9),
    )
    def tuya_delete(self, org: str, device: str, keys: set[str] | None, role_choice: int) -> None:
        role = self._role(org, role_choice)
        query: dict[str, Any] = (
            {"bind_role_type": 0, "role_id": role} if role else {"bind_role_type": 2}
        )
        query.update(
            {"clear_all_memory": "true"}
            if keys is None
            else {"memory_keys": ",".join(sorted(keys))}
        )
        answer = self._tuya(org, "DELETE", device, query)
        owner = self.device_owner.get(device)
        if owner is not None and owner != org:
            assert answer["code"] == 1106
            return
        assert answer["success"] is True, answer
        self.model.tuya_delete(org, device, keys, role)

    # --- searches ---------------------------------------------------------------------

    @rule(
        who=st.one_of(agents, people),
        text=QUERIES,
        mode=st.sampled_from(["semantic", "hybrid", "keyword"]),
        org_wide=st.booleans(),
    )
    def search(self, who: str, text: str, mode: str, org_wide: bool) -> None:
        """Whatever the query, a search answers a subset of the same actor's list; by meaning,
        once every memory is embedded, all of it (up to the limit)."""
        human = who in self.people_list
        if not human and who not in self.model.owner:
            return  # a deleted agent: its key is refused everywhere
        drain(self.store, EMBEDDER)
        url = HUMAN if human else AGENT
        params: dict[str, Any] = {}
        if org_wide and not human and self.model.org_of[who] is not None:
            params = {"memory_scope": "org", "scope": "all"}
        query = {"query": text, "mode": mode, "limit": 50, "status": "all", **params}
        response = self.client.get(f"{url}/search", params=query, headers=self._headers(who))
        if mode == "keyword" and response.status_code == 422:
            assert response.json()["error"]["code"] == "validation_failed"  # no words, too many
            return
        assert response.status_code == 200, response.text
        found = [row["content"] for row in response.json()["data"]]
        listed = self._walk(url, who, **params)
        assert len(found) == len(set(found)) and set(found) <= listed
        if mode == "semantic":
            assert len(found) == min(50, len(listed))

    # --- the views ----------------------------------------------------------------------

    def _walk(self, url: str, who: str, **params: Any) -> set[str]:
        contents: list[str] = []
        cursor = None
        while True:
            query = {
                **params,
                "limit": 100,
                "status": "all",
                **({"cursor": cursor} if cursor else {}),
            }
            body = self.client.get(url, params=query, headers=self._headers(who)).json()
            contents += [row["content"] for row in body["data"]]
            cursor = body["meta"]["next_cursor"]
            if cursor is None:
                assert len(contents) == len(set(contents))
                return set(contents)

    @invariant()
    def band_views_match(self) -> None:
        for agent in self.agent_list:
            want = {m.content for m in self.model.memories if m.source == agent}
            assert self._walk(AGENT, agent) == want
            if self.model.org_of[agent] is not None:
                want_ids = self.model.agent_list(agent, "org", "all", None)
                want = {
                    m.content
                    for m in self.model.memories
                    if m.id in want_ids or (m.source == agent)
                }
                assert self._walk(AGENT, agent, memory_scope="org", scope="all") == want
        for person in self.people_list:
            want = {m.content for m in self.model.memories if self.model.human_sees(person, m)}
            assert self._walk(HUMAN, person) == want

    @invariant()
    def history_matches(self) -> None:
        """Each memory's history through one caller (a different one at each step): visible
        exactly when the memory is, and the changes the model made, with their actors."""
        callers = self.people_list + self.agent_list
        for index, m in enumerate(m for m in self.model.memories if m.tuya is None):
            caller = callers[(index + self.n) % len(callers)]
            url = (AGENT if caller in self.model.owner else HUMAN) + f"/{m.id}/history"
            response = self.client.get(url, headers=self._headers(caller))
            assert response.status_code == self.model.history_status(caller, m), response.text
            if response.status_code == 200:
                got = [
                    (c["event"], c["actor"]["type"], c["actor"]["id"])
                    for c in response.json()["data"]
                ]
                assert got == m.history
                assert all(c["request_id"] for c in response.json()["data"])

    @invariant()
    def exports_match(self) -> None:
        """Each person's export: every memory about them (every status), nothing else."""
        for person in self.people_list:
            response = self.client.get(f"{HUMAN}/export", headers=self._headers(person))
            assert response.status_code == 200
            got = {json.loads(line)["id"] for line in response.text.splitlines()}
            assert got == {m.id for m in self.model.memories if m.subject == person}

    @invariant()
    def superagent_views_match(self) -> None:
        for person in self.people_list:
            for agent in self.agent_list:
                response = self.client.get(
                    f"/api/agents/{agent}/memory", headers={"api_key": self.keys[person]}
                )
                if not self.model.reaches(person, agent):
                    assert response.status_code == 403
                    continue
                got = {row["content"]: row["scope"] for row in response.json()}
                view = self.model.superagent_view(person, agent)
                want = {m.content: view[m.id] for m in self.model.memories if m.id in view}
                assert got == want

    @invariant()
    def tuya_views_match(self) -> None:
        for org in self.projects:
            for device in DEVICES:
                for role in [None, *[a for a in self.agent_list if self.model.org_of[a] == org]]:
                    query = (
                        {"bind_role_type": 0, "role_id": role} if role else {"bind_role_type": 2}
                    )
                    answer = self._tuya(org, "GET", device, query)
                    owner = self.device_owner.get(device)
                    if owner is not None and owner != org:
                        assert answer["code"] == 1106
                        continue
                    got = {
                        g["effective_scope"]: {
                            m["memory_key"]: m["memory_value"] for m in g["memory_list"]
                        }
                        for g in answer["result"]
                    }
                    assert got == self.model.tuya_groups(org, device, role)


Worlds.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=int(os.environ.get("MNEMOS_STATEFUL_STEPS", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestWorlds = Worlds.TestCase
