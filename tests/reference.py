"""A reference model of docs/design.md's visibility rules, written apart from `mnemos.domain`.

Tests compare what the server answers with what this model says; a rule broken in the domain
shows up as a difference. Keep this file close to docs/design.md's wording, not to the code. Its
questions are the ones `mnemos.domain.visibility` answers, one method each, so a new rule there
has an obvious place here: `agent_reads`/`agent_may_change`/`agent_list` (`agent_reads`,
`agent_changes`, `agent_list`), `human_sees`/`human_may_change` (`human_audiences`,
`human_changes`), `reaches`/`superagent_view` (`sees_agent`, `superagent_audiences`),
`tuya_groups` (`device_audiences`). A memory's history is visible exactly when the memory is
(`history_status`), and lists its changes with their actors (`M.history`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class M:
    id: str
    scope: str
    source: str | None
    org: str | None
    subject: str | None
    room: str | None
    status: str = "active"
    content: str = ""
    tuya: tuple[str, str, int] | None = None  # (device, key, effective scope) for Tuya memories
    # Its changes, oldest first: (event, actor type, actor id).
    history: list[tuple[str, str, str | None]] = field(default_factory=list)


@dataclass
class Model:
    owner: dict[str, str] = field(default_factory=dict)  # agent id -> owner id
    org_of: dict[str, str | None] = field(default_factory=dict)  # person or agent -> organization
    rooms_of: dict[str, set[str]] = field(default_factory=dict)  # person or agent -> room ids
    memories: list[M] = field(default_factory=list)

    # --- agents --------------------------------------------------------------------------

    def agent_reads(self, agent: str, m: M) -> bool:
        org = self.org_of[agent]
        shared = org is not None and m.org == org and m.scope in ("organization", "subject")
        return m.source == agent or shared

    def agent_may_change(self, agent: str, m: M) -> bool:
        return m.source == agent

    def agent_list(
        self, agent: str, memory_scope: str, scope: str | None, subject: str | None
    ) -> set[str]:
        org = self.org_of[agent]
        out = set()
        for m in self.memories:
            if memory_scope == "me":
                hit = (
                    m.source == agent
                    and scope in (None, "all", m.scope)
                    and subject in (None, m.subject)
                )
            elif scope in (None, "organization"):
                hit = m.org == org and m.scope == "organization" and subject in (None, m.subject)
            elif scope == "subject":
                hit = m.org == org and m.scope == "subject" and m.subject == subject
            elif scope == "agent":
                hit = m.source == agent and m.scope == "agent" and subject in (None, m.subject)
            else:
                hit = (
                    (m.org == org and m.scope == "organization")
                    or m.source == agent
                    or (
                        subject is not None
                        and m.org == org
                        and m.scope == "subject"
                        and m.subject == subject
                    )
                )
            if hit:
                out.add(m.id)
        return out

    # --- people --------------------------------------------------------------------------

    def owns(self, person: str, m: M) -> bool:
        return m.scope == "agent" and m.source is not None and self.owner.get(m.source) == person

    def human_sees(self, person: str, m: M, scope: str = "all") -> bool:
        org = self.org_of[person]
        about_me = m.scope == "subject" and m.subject == person
        shared = org is not None and m.scope == "organization" and m.org == org
        in_room = m.room in self.rooms_of.get(person, set()) and (
            (org is not None and m.org == org and m.scope in ("subject", "organization"))
            or self.owns(person, m)
        )
        return {
            "about_me": about_me,
            "organization": shared,
            "room": in_room,
            "all": about_me or shared or in_room or self.owns(person, m),
        }[scope]

    def human_may_change(self, person: str, m: M) -> bool:
        return (m.scope == "subject" and m.subject == person) or self.owns(person, m)

    # --- history ------------------------------------------------------------------------

    def history_status(self, caller: str, m: M) -> int:
        """What `GET .../memories/{id}/history` answers a caller: exactly what a get answers."""
        if caller in self.owner:  # an agent
            return 200 if self.agent_reads(caller, m) else 404
        return 200 if self.human_sees(caller, m) else 403

    # --- Superagent ----------------------------------------------------------------------

    def reaches(self, person: str, agent: str) -> bool:
        org = self.org_of[person]
        return self.owner[agent] == person or (org is not None and self.org_of[agent] == org)

    def superagent_view(self, person: str, agent: str) -> dict[str, str]:
        """Memory id -> `global` or `user`, active only."""
        org = self.org_of[person]
        view = {}
        for m in self.memories:
            if m.source != agent or m.status != "active":
                continue
            if m.scope == "subject" and m.subject == person:
                view[m.id] = "user"
            elif m.scope == "organization" and org is not None and m.org == org:
                view[m.id] = "global"
            elif m.scope == "agent" and self.owner[agent] == person and m.subject is None:
                view[m.id] = "global"
        return view

    # --- Tuya ------------------------------------------------------------------------------

    def tuya_groups(self, org: str, device: str, role: str | None) -> dict[int, dict[str, str]]:
        """Effective scope -> {key: value} of the active values a project call reaches."""
        groups: dict[int, dict[str, str]] = {}
        for m in self.memories:
            if m.tuya is None or m.status != "active" or m.tuya[0] != device:
                continue
            _, key, scope = m.tuya
            if (scope == 1 and m.org == org) or (
                scope == 3 and role is not None and m.source == role
            ):
                groups.setdefault(scope, {})[key] = m.content
        return groups

    def tuya_write(
        self, org: str, device: str, key: str, value: str, scope: int, role: str | None
    ) -> None:
        for m in self.memories:
            if m.tuya == (device, key, scope) and m.status == "active":
                if scope == 1 or m.source == role:
                    m.status = "superseded"
        self.memories.append(
            M(
                id=f"tuya:{len(self.memories)}:{value}",  # not a server id: Tuya answers none
                scope="subject" if scope == 1 else "agent",
                source=role,
                org=org if scope == 1 else None,
                subject=f"device:{device}",
                room=None,
                content=value,
                tuya=(device, key, scope),
            )
        )

    def tuya_delete(self, org: str, device: str, keys: set[str] | None, role: str | None) -> None:
        def doomed(m: M) -> bool:
            if (
                m.tuya is None
                or m.tuya[0] != device
                or (keys is not None and m.tuya[1] not in keys)
            ):
                return False
            return (m.tuya[2] == 1 and m.org == org) or (
                m.tuya[2] == 3 and role is not None and m.source == role
            )

        self.memories = [m for m in self.memories if not doomed(m)]

    # --- changes -------------------------------------------------------------------------

    def delete_agent(self, agent: str) -> None:
        self.memories = [m for m in self.memories if not (m.source == agent and m.scope == "agent")]
        for m in self.memories:
            if m.source == agent:
                m.source = None
                m.history.append(("source_removed", "user", self.owner[agent]))
        for rooms in (self.rooms_of.pop(agent, set()),):
            del rooms
        self.owner.pop(agent)
        self.org_of.pop(agent)
