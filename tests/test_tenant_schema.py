"""The schema is shard-ready (issue 18): every memory-side table carries `tenant_id`, in its
primary key, in every unique constraint and unique index, and in every foreign key to another
memory-side table, as Citus requires of tables distributed by it (docs/deploying.md). Every
other table is named here with why it is not distributed by tenant, so a new table must be
placed on one side or the other. The migrated PostgreSQL database is checked too."""

from __future__ import annotations

import sqlalchemy as sa

from mnemos.storage.base import Store
from mnemos.storage.schema import MEMORY_SIDE, metadata
from tests.tenant_filter import lacks_tenant

# Not distributed by tenant, each with its place in a Citus cluster (docs/deploying.md).
REFERENCE = {
    "organizations": "accounts: small, read by every request",
    "users": "accounts",
    "agents": "accounts",
    "api_keys": "credentials, looked up before the tenant is known",
    "chat_rooms": "rooms and their seats: accounts-side, joined by room lists",
    "chat_participants": "rooms",
    "tuya_projects": "Tuya accounts: a project names its organization",
    "tuya_tokens": "Tuya credentials, looked up before the tenant is known",
    "tuya_roles": "Tuya accounts",
    "tuya_devices": "Tuya's registry of devices: device id to organization and subject",
    "retention_policies": "per organization settings, read by the retention job",
    "server_secrets": "server-wide keys",
}
LOCAL = {
    "write_marks": "read replicas' marks: unlogged, primary only (not on workers)",
    "tuya_signatures": "replay protection: keyed by digest, never joined (distributed by it)",
    "ended_sessions": "signed-out web sessions: keyed by session id (distributed by it)",
    "search_pages": "a search's ordered answer: keyed by search id (distributed by it)",
    "subject_tenants": "which tenants hold memories about a subject: distributed by subject",
}


def test_every_table_is_placed() -> None:
    placed = set(MEMORY_SIDE) | set(REFERENCE) | set(LOCAL)
    assert set(metadata.tables) == placed
    assert not set(MEMORY_SIDE) & (set(REFERENCE) | set(LOCAL))


def test_memory_side_keys_lead_with_the_tenant() -> None:
    for name in MEMORY_SIDE:
        table = metadata.tables[name]
        tenant = table.c.tenant_id
        assert not tenant.nullable, name
        assert tenant in table.primary_key.columns.values(), name
        for constraint in table.constraints:
            if isinstance(constraint, sa.UniqueConstraint):
                assert tenant in constraint.columns.values(), (name, constraint.name)
            if isinstance(constraint, sa.ForeignKeyConstraint):
                if constraint.referred_table.name in MEMORY_SIDE:
                    assert tenant in constraint.columns.values(), (name, constraint.name)
        for index in table.indexes:
            if index.unique:
                assert tenant in index.columns.values(), (name, index.name)


def test_the_migrated_postgres_database_has_the_same_keys(store: Store) -> None:
    with store._read() as conn:  # type: ignore[attr-defined]
        if conn.dialect.name != "postgresql":
            return  # SQLite keeps `pk` as its rowid (migration 0018)
        inspector = sa.inspect(conn)
        for name in MEMORY_SIDE:
            key = inspector.get_pk_constraint(name)["constrained_columns"]
            assert key[0] == "tenant_id", (name, key)
            for unique in inspector.get_unique_constraints(name):
                assert "tenant_id" in unique["column_names"], (name, unique)
            for index in inspector.get_indexes(name):
                if index["unique"]:
                    assert "tenant_id" in index["column_names"], (name, index)


def test_the_suite_check_tells_a_filter_from_a_column() -> None:
    assert lacks_tenant("SELECT memories.tenant_id, memories.id FROM memories WHERE id = ?")
    assert lacks_tenant("DELETE FROM memory_history WHERE memory_history.subject_id = ?")
    assert lacks_tenant("INSERT INTO erasures (id, subject_id) VALUES (?, ?)")
    assert not lacks_tenant("SELECT id FROM memories WHERE memories.tenant_id = ? AND id = ?")
    assert not lacks_tenant("SELECT id FROM memories WHERE memories.tenant_id IN (?, ?)")
    joined = "SELECT 1 FROM memories JOIN m2 ON m2.id = memories.id AND m2.tenant_id = x.tenant_id"
    assert not lacks_tenant(joined)
    assert not lacks_tenant("INSERT INTO memories (id, tenant_id) VALUES (?, ?)")
    checked = "INSERT INTO memories (id, tenant_id) SELECT ?, ? WHERE EXISTS (SELECT 1 FROM agents)"
    assert not lacks_tenant(checked)  # the SELECT reads no memory-side table
    assert lacks_tenant("INSERT INTO memories (id, tenant_id) SELECT id, ? FROM memories")
    assert lacks_tenant("INSERT INTO erasures (id) SELECT ? WHERE EXISTS (SELECT 1 FROM agents)")
    assert not lacks_tenant("SELECT /* every tenant */ 1 FROM memories WHERE id = ?")
    assert not lacks_tenant("SELECT 1 FROM memories_fts WHERE memories_fts MATCH ?")
