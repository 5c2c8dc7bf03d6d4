"""PostgreSQL: the planner learns that a memory's owners decide its tenant.

Every memory query names its tenant beside an owner (`domain/tenants.py`): `organization_id = X
AND tenant_id = X`, `source_agent_id = A AND tenant_id = T`. Without statistics on both columns
the planner multiplies their selectivities, so it expects a tenth of an organization's rows (with
ten tenants), intersects two bitmaps and sorts them instead of walking the owner's index in
order: at 1,000,000 memories an organization-wide common-word search's edge query took 209 ms
instead of 2.1 ms (BENCHMARKS.md, "Quiet rerun at 1,000,000"). Statistics over each owner column
with the tenant give it the owners' real counts: a list of the most common (owner, tenant) pairs
(exact for the owners big enough for the plan to matter; a small owner's rows are few whatever
the plan) and the degree to which the owner decides the tenant. Functional dependencies alone
are not enough: the rows without that owner (NULL) spread over every tenant and lower the degree
to about the owner's share of rows. SQLite's planner does not multiply them this way.

Revision ID: 0020_owner_statistics
Revises: 0019_vector_tenants
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0020_owner_statistics"
down_revision = "0019_vector_tenants"
branch_labels = None
depends_on = None

OWNERS = ("organization_id", "source_agent_id", "subject_id", "chat_room_id")


def _name(owner: str) -> str:
    return f"st_memories_tenant_{owner}"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for owner in OWNERS:
        op.execute(
            f"CREATE STATISTICS IF NOT EXISTS {_name(owner)} (mcv, dependencies) "
            f"ON tenant_id, {owner} FROM memories"
        )
    op.execute("ANALYZE memories")  # plans use them from now, not from the next autovacuum


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for owner in OWNERS:
        op.execute(f"DROP STATISTICS IF EXISTS {_name(owner)}")
