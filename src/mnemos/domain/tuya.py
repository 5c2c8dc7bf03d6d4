"""Tuya device memories over the shared memory store (docs/design.md, "Tuya device memories").

A device is a subject of the organization whose project first wrote it. A role is an agent of
that organization (`role_id` is the agent's id, or a role bound to an agent with
`mnemos admin bind-tuya-role`); `bind_role_type` 2 means no role. Scope 1 ("Global memory") is
a subject memory about the device, shared by every role of the organization; scope 3 ("Role's
memory") is an agent-scoped memory of the role's agent that also records the device. Writing a
key that holds an active value in the same scope supersedes it, keeping it as history.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum
from typing import Any, Protocol

from mnemos.domain.history import by_tuya
from mnemos.domain.ids import try_uuid, utcnow, uuid7
from mnemos.domain.models import Memory, MemoryType, Scope, Segment, Status, System
from mnemos.domain.ports import AccountStore, MemoryStore, TuyaStore
from mnemos.domain.queries import MemoryQuery
from mnemos.domain.tuya_auth import (
    TuyaCaller,
    TuyaError,
    param_empty,
    param_illegal,
    permission_deny,
)
from mnemos.domain.values import text_problem
from mnemos.domain.visibility import device_audiences, plan_allows


class TuyaScope(IntEnum):
    """Tuya's `effective_scope` (its wire values): a device's global memory or its role's. Not
    a memory `Scope`: a global entry is stored as a `subject` memory, a role's as an `agent` one.
    """

    GLOBAL = 1
    ROLE = 3


GLOBAL, ROLE = TuyaScope.GLOBAL, TuyaScope.ROLE
SCOPE_NAMES: dict[int, str] = {GLOBAL: "Global memory", ROLE: "Role's memory"}
MAX_KEYS = 20
MAX_WRITE = 50
MAX_VALUE = 10_000
# Checked with `fullmatch` (`$` would let a trailing newline through).
DEVICE_ID = re.compile(r"[A-Za-z0-9_.*-]{1,64}")
MEMORY_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
ROLE_ID = re.compile("[^\x00-\x1f\x7f\ud800-\udfff]{1,64}")  # as `bind-tuya-role` stores it
LIST_CAP = 10_000
DELETE_BATCH = 1_000


@dataclass(frozen=True)
class Binding:
    """Which scopes a call reaches: the device's global memory, and the role's if it has one."""

    bind_role_type: int
    agent_id: uuid.UUID | None

    @property
    def scopes(self) -> tuple[TuyaScope, ...]:
        return (GLOBAL, ROLE) if self.agent_id else (GLOBAL,)


@dataclass(frozen=True)
class Entry:
    memory_key: str
    memory_name: str
    memory_value: str
    effective_scope: TuyaScope


class TuyaMemoryStore(TuyaStore, MemoryStore, AccountStore, Protocol):
    """Tuya's slots and devices, memories, and the organizations and agents they belong to."""


class TuyaMemories:
    def __init__(self, store: TuyaMemoryStore):
        self.store = store

    # --- parameters --------------------------------------------------------------------

    @staticmethod
    def device(device_id: str) -> str:
        if not DEVICE_ID.fullmatch(device_id):
            raise param_illegal("device_id", "must be 1-64 letters, digits or ._-*")
        return device_id

    def binding(self, caller: TuyaCaller, bind_role_type: Any, role_id: Any) -> Binding:
        if bind_role_type is None or bind_role_type == "":
            raise param_empty("bind_role_type")
        # Exactly 0, 1 or 2: a JSON integer or the query string's digit (not 2.5, `true`, "２").
        kinds = {0: 0, 1: 1, 2: 2, "0": 0, "1": 1, "2": 2}
        if isinstance(bind_role_type, bool) or not isinstance(bind_role_type, int | str):
            raise param_illegal("bind_role_type", "must be 0, 1 or 2")
        kind = kinds.get(bind_role_type)
        if kind is None:
            raise param_illegal("bind_role_type", "must be 0, 1 or 2")
        if kind == 2:
            return Binding(kind, None)
        if role_id is None or str(role_id) == "":
            raise param_empty("role_id")
        if not ROLE_ID.fullmatch(str(role_id)):
            raise not_a_role()
        return Binding(kind, self._role_agent(caller, str(role_id)))

    def _role_agent(self, caller: TuyaCaller, role_id: str) -> uuid.UUID:
        org = caller.organization_id
        bound = self.store.tuya_role_agent(org, role_id)
        if bound is not None:
            return bound
        ident = try_uuid(role_id)
        if ident is not None:
            for agent, owner_org in self.store.agents_by_ids([ident]):
                if owner_org == org:
                    return agent.id
        raise not_a_role()

    def _subject(self, caller: TuyaCaller, device_id: str, claim: bool) -> uuid.UUID | None:
        found = self.store.tuya_device(device_id)
        if found is None and claim:
            found = self.store.claim_tuya_device(device_id, caller.organization_id)
        if found is None:
            return None
        owner, subject = found
        if owner != caller.organization_id:
            raise permission_deny("the device belongs to another organization")
        return subject

    def _require_plan(self, caller: TuyaCaller) -> None:
        if not self._memory_open(caller):
            raise permission_deny("memory is not enabled for this organization")

    # --- reads -------------------------------------------------------------------------

    def _current(self, caller: TuyaCaller, subject: uuid.UUID, binding: Binding) -> list[Memory]:
        """Every active Tuya memory the call reaches; refused, never cut short, past `LIST_CAP`
        (Tuya's list has no paging: a caller must delete keys to list again)."""
        query = MemoryQuery(
            audiences=device_audiences(caller.organization_id, subject, binding.agent_id)
        )
        rows = self.store.list_memories(query, limit=LIST_CAP + 1)
        if len(rows) > LIST_CAP:
            raise TuyaError(
                1101, f"params range invalid: the device has more than {LIST_CAP} memories"
            )
        return [m for m in rows if _tuya_meta(m) is not None]

    def list_groups(
        self, caller: TuyaCaller, device_id: str, binding: Binding
    ) -> list[dict[str, Any]]:
        self._require_plan(caller)
        subject = self._subject(caller, self.device(device_id), claim=False)
        if subject is None:
            return []
        groups: dict[int, list[dict[str, Any]]] = {}
        for memory in reversed(self._current(caller, subject, binding)):  # oldest first
            meta = _tuya_meta(memory)
            assert meta is not None
            scope = meta["effective_scope"]
            groups.setdefault(scope, []).append(
                {
                    "memory_key": meta["memory_key"],
                    "memory_name": meta["memory_name"],
                    "memory_value": memory.content,
                    "effective_scope": scope,
                    "effective_scope_name": SCOPE_NAMES[scope],
                }
            )
        return [
            {
                "effective_scope": scope,
                "effective_scope_name": SCOPE_NAMES[scope],
                "memory_list": groups[scope],
            }
            for scope in sorted(groups, reverse=True)
        ]

    # --- writes ------------------------------------------------------------------------

    def parse_entries(self, binding: Binding, raw: Any) -> list[Entry]:
        """The entries of a write; a key may appear once per scope (which value would win is
        not Tuya's to say, so a repeated key is refused, not resolved)."""
        if raw is None or raw == []:
            raise param_empty("memory_list")
        if not isinstance(raw, list) or len(raw) > MAX_WRITE:
            raise param_illegal("memory_list", f"must be a list of at most {MAX_WRITE} items")
        entries = [_entry(binding, item) for item in raw]
        seen: set[tuple[int, str]] = set()
        for entry in entries:
            if (entry.effective_scope, entry.memory_key) in seen:
                raise param_illegal("memory_key", f"{entry.memory_key} is written twice")
            seen.add((entry.effective_scope, entry.memory_key))
        return entries

    def write(
        self, caller: TuyaCaller, device_id: str, binding: Binding, entries: list[Entry]
    ) -> None:
        """Store the entries; each supersedes its key's active value in its scope (the store
        keeps one active value per key and scope, even against concurrent writers)."""
        self._require_plan(caller)
        subject = self._subject(caller, self.device(device_id), claim=True)
        assert subject is not None
        now = utcnow()
        new = [
            (_memory(caller, subject, device_id, binding, entry, now), _slot(binding, entry))
            for entry in entries
        ]
        if not self.store.put_tuya_memories(new, now, by=by_tuya(caller.client_id)):
            raise not_a_role()  # its agent was deleted since `binding` read the role

    def delete(
        self,
        caller: TuyaCaller,
        device_id: str,
        binding: Binding,
        keys: list[str] | None,
        clear_all: bool,
    ) -> None:
        """Delete every version of the named keys (or all keys) in the scopes the call reaches,
        in bounded batches: a large device never holds the write lock for long."""
        self._require_plan(caller)
        subject = self._subject(caller, self.device(device_id), claim=False)
        if subject is None:
            return
        owners = [_slot_owner(binding, scope) for scope in binding.scopes]
        by, tenant = by_tuya(caller.client_id), caller.organization_id
        if clear_all:
            self.store.delete_tuya_memories(tenant, subject, [], owners, DELETE_BATCH, by=by)
        else:
            slots = [owner + key for owner in owners for key in keys or []]
            self.store.delete_tuya_memories(tenant, subject, slots, [], DELETE_BATCH, by=by)

    @staticmethod
    def parse_keys(raw: str | None, clear_all: bool) -> list[str] | None:
        if clear_all:
            return None
        if not raw:
            raise param_empty("memory_keys")
        keys = [key.strip() for key in raw.split(",") if key.strip()]
        if not keys:
            raise param_empty("memory_keys")
        if len(keys) > MAX_KEYS:
            raise param_illegal("memory_keys", f"at most {MAX_KEYS} keys")
        return keys

    def switch(self, caller: TuyaCaller) -> dict[str, bool]:
        return {"memory_open": self._memory_open(caller), "summary_open": False}

    def _memory_open(self, caller: TuyaCaller) -> bool:
        """The project's organization exists and its plan includes memory."""
        org = self.store.get_organization(caller.organization_id)
        return org is not None and plan_allows(org)


def not_a_role() -> TuyaError:
    return param_illegal("role_id", "is not a role of this project")


def _text(name: str, value: str) -> None:
    """The text rule of `domain/values.py`, refused in Tuya's terms."""
    problem = text_problem(value)
    if problem is not None:
        raise param_illegal(name, problem)


def _entry(binding: Binding, item: Any) -> Entry:
    if not isinstance(item, dict):
        raise param_illegal("memory_list", "items must be objects")
    key, value = item.get("memory_key"), item.get("memory_value")
    name, scope = item.get("memory_name") or key, item.get("effective_scope", GLOBAL)
    if not isinstance(key, str) or not MEMORY_KEY.fullmatch(key):
        raise param_illegal("memory_key", "must be 1-100 letters, digits or ._:-")
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_VALUE:
        raise param_illegal("memory_value", f"must be 1-{MAX_VALUE} characters")
    if not isinstance(name, str) or len(name) > 200:
        raise param_illegal("memory_name", "must be a string of at most 200 characters")
    _text("memory_value", value)
    _text("memory_name", name)
    # Exactly the integer: `true == 1` and `1.0 == 1` in Python, but neither is a scope.
    if isinstance(scope, bool) or not isinstance(scope, int) or scope not in binding.scopes:
        raise param_illegal("effective_scope", f"must be one of {[int(s) for s in binding.scopes]}")
    return Entry(key, name, value, TuyaScope(scope))


def _slot_owner(binding: Binding, scope: TuyaScope) -> str:
    """The start of a slot: the scope, and for a role's memory the role's agent."""
    return f"{GLOBAL}:" if scope == GLOBAL else f"{ROLE}:{binding.agent_id}:"


def _slot(binding: Binding, entry: Entry) -> str:
    return _slot_owner(binding, entry.effective_scope) + entry.memory_key


def _memory(
    caller: TuyaCaller,
    subject: uuid.UUID,
    device_id: str,
    binding: Binding,
    entry: Entry,
    now: datetime,
) -> Memory:
    role = entry.effective_scope == ROLE
    return Memory(
        id=uuid7(),
        content=entry.memory_value,
        thought=f"Tuya device memory {entry.memory_key}",
        system=System.LONG_TERM,
        type=MemoryType.SEMANTIC,
        segment=Segment.USER,
        scope=Scope.AGENT if role else Scope.SUBJECT,
        subject_id=subject,
        organization_id=None if role else caller.organization_id,
        source_agent_id=binding.agent_id,
        chat_room_id=None,
        metadata={
            "tuya": {
                "device_id": device_id,
                "memory_key": entry.memory_key,
                "memory_name": entry.memory_name,
                "effective_scope": entry.effective_scope,
                "slot": f"{entry.effective_scope}:{entry.memory_key}",
            }
        },
        status=Status.ACTIVE,
        inserted_at=now,
        updated_at=now,
        tenant_id=caller.organization_id,  # the project's (`domain/tenants.py`)
    )


def _tuya_meta(memory: Memory) -> dict[str, Any] | None:
    meta = memory.metadata.get("tuya") if isinstance(memory.metadata, dict) else None
    return meta if isinstance(meta, dict) and meta.get("effective_scope") in SCOPE_NAMES else None


__all__ = ["Binding", "Entry", "TuyaError", "TuyaMemories"]
