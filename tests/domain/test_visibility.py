"""`mnemos.domain.visibility` is the one home of visibility rules (no database)."""

from __future__ import annotations

import re
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

import mnemos
from mnemos.domain.models import Organization, Scope
from mnemos.domain.queries import Audience
from mnemos.domain.visibility import (
    admitted,
    agent_changes,
    agent_reads,
    plan_allows,
    require_memory_plan,
)
from mnemos.errors import PlanRequired
from tests.domain.test_rules import ORG, context, memory

SOURCE = Path(mnemos.__file__).parent
# Where audiences may be written: the rules, and the query types that define them.
RULES = {"domain/visibility.py", "domain/queries.py"}


def test_audiences_are_built_only_in_the_visibility_module() -> None:
    builders = [
        str(path.relative_to(SOURCE))
        for path in SOURCE.rglob("*.py")
        if re.search(r"\bAudience\(", path.read_text())
    ]
    assert sorted(set(builders) - RULES) == []


def test_agent_reads_its_own_and_its_organizations_shared_memories() -> None:
    ctx = context()
    me = ctx.agent.id
    assert admitted(agent_reads(ctx), memory(Scope.AGENT, me, None))
    assert admitted(agent_reads(ctx), memory(Scope.ORGANIZATION, None, ORG.id))
    assert admitted(agent_reads(ctx), memory(Scope.SUBJECT, uuid.uuid4(), ORG.id))
    assert not admitted(agent_reads(ctx), memory(Scope.AGENT, uuid.uuid4(), None))
    assert not admitted(agent_reads(ctx), memory(Scope.ORGANIZATION, None, uuid.uuid4()))
    lonely = context(None)
    assert not admitted(agent_reads(lonely), memory(Scope.ORGANIZATION, None, None))


def test_agent_changes_only_what_it_stored() -> None:
    ctx = context()
    assert admitted(agent_changes(ctx), memory(Scope.ORGANIZATION, ctx.agent.id, ORG.id))
    assert not admitted(agent_changes(ctx), memory(Scope.ORGANIZATION, None, ORG.id))


def test_audiences_that_need_the_store_are_not_decided_in_python() -> None:
    with pytest.raises(ValueError):
        admitted(
            (Audience(source_agent_owner_id=uuid.uuid4(), tenant_id=ORG.id),),
            memory(Scope.AGENT, None, None),
        )


def test_one_plan_rule_for_people_organizations_and_projects() -> None:
    ctx = context()
    off = Organization(uuid.uuid4(), "Off", memory_enabled=False)
    assert plan_allows(ctx.owner, ORG) and not plan_allows(off)
    require_memory_plan(ctx.owner, None)  # a person in no organization needs only their own
    with pytest.raises(PlanRequired):
        require_memory_plan(ctx.owner, off)
    with pytest.raises(PlanRequired):
        require_memory_plan(replace(ctx.owner, memory_enabled=False), ORG)
