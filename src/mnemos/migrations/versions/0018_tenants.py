"""Every memory-side row names its tenant (`tenant_id`), which leads its keys: shard-ready.

`memories`, `memory_history`, `idempotency_keys` and `erasures` gain `tenant_id` (the memory's
organization, or the storing agent's owner's organization, or that owner when they have none;
an erasure is the erased person's own: `domain/tenants.py`), filled here from the rows they hold. On
PostgreSQL it leads their primary keys and unique constraints, as Citus requires of a table
distributed by it (docs/deploying.md, "Sharding by tenant"). `subject_tenants` lists which
tenants hold memories or history about a subject, for a person's cross-tenant reads.

SQLite is never distributed: `memories.pk` stays its rowid (FTS5 and the vector tables key on
it), so its keys keep their columns and gain unique indexes with `tenant_id`; a rebuild of
`memories` would drop its triggers and cascade to its vectors, so a trigger refuses a memory
without a tenant instead of a NOT NULL.

Rows that name no tenant anywhere (history of memories deleted before this revision, a memory
whose agent is gone) get the nil UUID, a tenant of their own (`domain/tenants.py`, `UNKNOWN`).

Revision ID: 0018_tenants
Revises: 0017_search_owner
Create Date: 2026-12-02
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0018_tenants"
down_revision = "0017_search_owner"
branch_labels = None
depends_on = None

UNKNOWN = uuid.UUID(int=0)
TABLES = ("memories", "memory_history", "idempotency_keys", "erasures")

# The tenant of an agent (by the column `agent` of the row being filled): its owner's
# organization, or its owner.
_AGENT_TENANT = (
    "(SELECT COALESCE(u.organization_id, u.id) FROM agents a JOIN users u ON u.id = a.owner_id "
    "WHERE a.id = {agent})"
)
BACKFILL = {
    "memories": "UPDATE memories SET tenant_id = COALESCE(organization_id, "
    + _AGENT_TENANT.format(agent="memories.source_agent_id")
    + ", :unknown)",
    "memory_history": "UPDATE memory_history SET tenant_id = COALESCE((SELECT m.tenant_id "
    "FROM memories m WHERE m.id = memory_history.memory_id), :unknown)",
    "idempotency_keys": "UPDATE idempotency_keys SET tenant_id = COALESCE((SELECT m.tenant_id "
    "FROM memories m WHERE m.id = idempotency_keys.memory_id), "
    + _AGENT_TENANT.format(agent="idempotency_keys.principal_id")
    + ", :unknown)",
    "erasures": "UPDATE erasures SET tenant_id = subject_id",
}
SUBJECT_TENANTS = (
    "INSERT INTO subject_tenants (subject_id, tenant_id) "
    "SELECT subject_id, tenant_id FROM memories WHERE subject_id IS NOT NULL "
    "UNION SELECT subject_id, tenant_id FROM memory_history WHERE subject_id IS NOT NULL"
)
# Primary keys on PostgreSQL, before and after.
KEYS = {
    "memories": (["pk"], ["tenant_id", "pk"]),
    "memory_history": (["pk"], ["tenant_id", "pk"]),
    "idempotency_keys": (["principal_id", "key"], ["tenant_id", "principal_id", "key"]),
    "erasures": (["id"], ["tenant_id", "id"]),
}
ACTIVE_TUYA_SLOT = sa.text("status = 'active' AND tuya_slot IS NOT NULL")
REQUIRED_TRIGGER = (
    "CREATE TRIGGER memories_tenant_required BEFORE INSERT ON memories "
    "WHEN NEW.tenant_id IS NULL BEGIN "
    "SELECT RAISE(ABORT, 'NOT NULL constraint failed: memories.tenant_id'); END"
)


def upgrade() -> None:
    bind = op.get_bind()
    postgres = bind.dialect.name == "postgresql"
    for table in TABLES:
        op.add_column(table, sa.Column("tenant_id", sa.Uuid(), nullable=True))
    unknown = sa.bindparam("unknown", UNKNOWN, type_=sa.Uuid())
    for table in TABLES:
        statement = sa.text(BACKFILL[table])
        op.execute(statement.bindparams(unknown) if ":unknown" in BACKFILL[table] else statement)
    op.create_table(
        "subject_tenants",
        sa.Column("subject_id", sa.Uuid(), primary_key=True),
        sa.Column("tenant_id", sa.Uuid(), primary_key=True),
    )
    op.execute(SUBJECT_TENANTS)
    op.drop_index("uq_memories_tuya_slot_active", "memories")
    op.create_index(
        "uq_memories_tuya_slot_active",
        "memories",
        ["tenant_id", "subject_id", "tuya_slot"],
        unique=True,
        sqlite_where=ACTIVE_TUYA_SLOT,
        postgresql_where=ACTIVE_TUYA_SLOT,
    )
    if postgres:
        for table, (_, after) in KEYS.items():
            op.alter_column(table, "tenant_id", nullable=False)
            op.drop_constraint(f"pk_{table}", table, type_="primary")
            op.create_primary_key(f"pk_{table}", table, after)
        op.drop_constraint("uq_memories_id", "memories", type_="unique")
        op.create_unique_constraint("uq_memories_tenant_id_id", "memories", ["tenant_id", "id"])
        op.create_index("ix_memories_id", "memories", ["id"])  # reads by id across tenants
        return
    # SQLite: NOT NULL by a table rebuild where nothing hangs on the table, by a trigger on
    # `memories`; the keys with the tenant as unique indexes.
    for table in ("memory_history", "idempotency_keys", "erasures"):
        with op.batch_alter_table(table) as batch:
            batch.alter_column("tenant_id", nullable=False)
    op.execute(REQUIRED_TRIGGER)
    op.create_index("uq_memories_tenant_id_id", "memories", ["tenant_id", "id"], unique=True)
    for table, (_, after) in KEYS.items():
        if table != "memories":
            op.create_index(f"uq_{table}_tenant_key", table, after, unique=True)


def downgrade() -> None:
    bind = op.get_bind()
    postgres = bind.dialect.name == "postgresql"
    op.drop_index("uq_memories_tuya_slot_active", "memories")
    if postgres:
        op.drop_index("ix_memories_id", "memories", if_exists=True)
        op.drop_constraint("uq_memories_tenant_id_id", "memories", type_="unique")
        op.create_unique_constraint("uq_memories_id", "memories", ["id"])
        for table, (before, _) in KEYS.items():
            op.drop_constraint(f"pk_{table}", table, type_="primary")
            op.create_primary_key(f"pk_{table}", table, before)
    else:
        op.execute("DROP TRIGGER memories_tenant_required")
        op.drop_index("uq_memories_tenant_id_id", "memories")
        for table in KEYS:
            if table != "memories":
                op.drop_index(f"uq_{table}_tenant_key", table)
    op.create_index(
        "uq_memories_tuya_slot_active",
        "memories",
        ["subject_id", "tuya_slot"],
        unique=True,
        sqlite_where=ACTIVE_TUYA_SLOT,
        postgresql_where=ACTIVE_TUYA_SLOT,
    )
    op.drop_table("subject_tenants")
    for table in TABLES:
        if table == "memories" and not postgres:
            op.drop_column(table, "tenant_id")  # no rebuild: its triggers and vectors stay
            continue
        with op.batch_alter_table(table) as batch:
            batch.drop_column("tenant_id")
