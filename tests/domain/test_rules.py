"""The visibility rules of docs/design.md, checked on the query the domain builds (no database)."""

import uuid
from datetime import UTC, datetime

import pytest

from mnemos.domain.ids import uuid7
from mnemos.domain.memories import AgentListParams, MemoryService
from mnemos.domain.models import (
    Agent,
    AgentContext,
    Memory,
    MemoryType,
    Organization,
    Scope,
    Segment,
    Status,
    System,
    User,
)
from mnemos.domain.queries import Audience, Filters
from mnemos.errors import OrgScopeRequiresOrganization, SubjectIdRequired

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ORG = Organization(uuid.uuid4(), "Acme")


def context(org: Organization | None = ORG) -> AgentContext:
    owner = User(uuid.uuid4(), "Ann", "a@x", "ann", org.id if org else None, True, NOW, NOW)
    agent = Agent(uuid.uuid4(), "Bot", None, owner.id, "ann/bot", NOW, NOW)
    return AgentContext(agent, owner, org)


def memory(
    scope: Scope, source: uuid.UUID | None, org: uuid.UUID | None, tenant: uuid.UUID | None = None
) -> Memory:
    """A memory; its tenant is `tenant`, else its organization, else `ORG` (the test agent's)."""
    return Memory(
        uuid7(),
        "x",
        "t",
        System.LONG_TERM,
        MemoryType.SEMANTIC,
        Segment.USER,
        scope,
        uuid.uuid4() if scope is Scope.SUBJECT else None,
        org,
        source,
        None,
        {},
        Status.ACTIVE,
        NOW,
        NOW,
        tenant or org or ORG.id,
    )


def audiences(ctx: AgentContext, **params: object) -> tuple[Audience, ...]:
    service = MemoryService(store=None, codec=None)  # type: ignore[arg-type]
    return service.agent_query(ctx, AgentListParams(**params), Filters()).audiences  # type: ignore[arg-type]


def test_me_is_everything_this_agent_stored() -> None:
    ctx = context()
    assert audiences(ctx) == (Audience(source_agent_id=ctx.agent.id, tenant_id=ORG.id),)
    assert audiences(ctx, scope="subject") == (
        Audience(source_agent_id=ctx.agent.id, scopes=(Scope.SUBJECT,), tenant_id=ORG.id),
    )


def test_org_defaults_to_organization_memories_only() -> None:
    ctx = context()
    assert audiences(ctx, memory_scope="org") == (
        Audience(organization_id=ORG.id, scopes=(Scope.ORGANIZATION,), tenant_id=ORG.id),
    )


def test_org_subject_needs_a_subject() -> None:
    with pytest.raises(SubjectIdRequired):
        audiences(context(), memory_scope="org", scope="subject")
    subject = uuid.uuid4()
    assert audiences(context(), memory_scope="org", scope="subject", subject_id=subject) == (
        Audience(
            organization_id=ORG.id, scopes=(Scope.SUBJECT,), subject_id=subject, tenant_id=ORG.id
        ),
    )


def test_org_all_is_the_union() -> None:
    ctx = context()
    subject = uuid.uuid4()
    assert audiences(ctx, memory_scope="org", scope="all", subject_id=subject) == (
        Audience(organization_id=ORG.id, scopes=(Scope.ORGANIZATION,), tenant_id=ORG.id),
        Audience(source_agent_id=ctx.agent.id, tenant_id=ORG.id),
        Audience(
            organization_id=ORG.id, scopes=(Scope.SUBJECT,), subject_id=subject, tenant_id=ORG.id
        ),
    )


def test_org_without_organization_is_refused() -> None:
    with pytest.raises(OrgScopeRequiresOrganization):
        audiences(context(org=None), memory_scope="org")


def test_an_audience_must_pin_an_owner() -> None:
    with pytest.raises(ValueError):
        Audience(scopes=(Scope.ORGANIZATION,))


def test_an_audience_must_pin_its_tenant_or_a_subject() -> None:
    with pytest.raises(ValueError, match="tenant"):
        Audience(organization_id=ORG.id, scopes=(Scope.ORGANIZATION,))
    assert Audience(subject_id=uuid.uuid4()).tenant_id is None  # the subject's tenants


def test_an_agent_reads_within_its_tenant_only() -> None:
    ctx = context()
    for audience in audiences(ctx, memory_scope="org", scope="all", subject_id=uuid.uuid4()):
        assert audience.tenant_id == ORG.id
    assert not MemoryService.agent_can_read(
        ctx, memory(Scope.AGENT, ctx.agent.id, None, tenant=uuid.uuid4())
    )


def test_read_one_rules() -> None:
    ctx = context()
    other = uuid.uuid4()
    can = MemoryService.agent_can_read
    assert can(ctx, memory(Scope.AGENT, ctx.agent.id, None))
    assert can(ctx, memory(Scope.ORGANIZATION, other, ORG.id))
    assert can(ctx, memory(Scope.SUBJECT, other, ORG.id))
    assert not can(ctx, memory(Scope.AGENT, other, None))
    assert not can(ctx, memory(Scope.ORGANIZATION, other, uuid.uuid4()))


def test_no_organization_never_matches_another_no_organization() -> None:
    lonely = context(org=None)
    assert not MemoryService.agent_can_read(lonely, memory(Scope.SUBJECT, uuid.uuid4(), None))
    assert not MemoryService.agent_can_read(lonely, memory(Scope.ORGANIZATION, None, None))
