"""Initial schema: accounts, keys, rooms, memories with full-text search.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from mnemos.storage.schema import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _stamps() -> list[sa.Column[object]]:
    return [
        sa.Column("inserted_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "organizations",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("memory_enabled", sa.Boolean(), nullable=False, server_default=sa.true()),
        sa.Column("inserted_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("email", sa.String(320), nullable=False, unique=True),
        sa.Column("handle", sa.String(100), nullable=False, unique=True),
        sa.Column(
            "organization_id",
            sa.Uuid(),
            sa.ForeignKey("organizations.id", ondelete="SET NULL"),
            nullable=True,
            index=True,
        ),
        sa.Column("memory_enabled", sa.Boolean(), nullable=False, server_default=sa.true()),
        *_stamps(),
    )
    op.create_table(
        "agents",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column(
            "owner_id",
            sa.Uuid(),
            sa.ForeignKey("users.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("handle", sa.String(200), nullable=False, unique=True),
        *_stamps(),
    )
    op.create_table(
        "api_keys",
        sa.Column("key_hash", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(10), nullable=False),
        sa.Column("principal_id", sa.Uuid(), nullable=False, index=True),
        sa.Column("inserted_at", UTCDateTime(), nullable=False),
        sa.Column("revoked_at", UTCDateTime(), nullable=True),
    )
    op.create_table(
        "chat_rooms",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("title", sa.String(300), nullable=True),
        sa.Column("type", sa.String(20), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("owner_type", sa.String(10), nullable=False),
        sa.Column("owner_id", sa.Uuid(), nullable=False),
        *_stamps(),
    )
    op.create_table(
        "chat_participants",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column(
            "chat_room_id",
            sa.Uuid(),
            sa.ForeignKey("chat_rooms.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("participant_type", sa.String(10), nullable=False),
        sa.Column("participant_id", sa.Uuid(), nullable=False),
        sa.Column("role", sa.String(10), nullable=False),
        sa.Column("inserted_at", UTCDateTime(), nullable=False),
        sa.UniqueConstraint("chat_room_id", "participant_id"),
    )
    op.create_index(
        "ix_chat_participants_member", "chat_participants", ["participant_id", "chat_room_id"]
    )
    op.create_table(
        "memories",
        sa.Column("pk", PK, primary_key=True, autoincrement=True),
        sa.Column("id", sa.Uuid(), nullable=False, unique=True),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("search_text", sa.Text(), nullable=False),
        sa.Column("thought", sa.Text(), nullable=True),
        sa.Column("system", sa.String(16), nullable=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("segment", sa.String(16), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("subject_id", sa.Uuid(), nullable=True),
        sa.Column("organization_id", sa.Uuid(), nullable=True),
        sa.Column("source_agent_id", sa.Uuid(), nullable=True),
        sa.Column("chat_room_id", sa.Uuid(), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        *_stamps(),
    )
    for name, columns in {
        "ix_memories_agent_order": ["source_agent_id", "inserted_at", "id"],
        "ix_memories_org_order": ["organization_id", "scope", "inserted_at", "id"],
        "ix_memories_subject_order": ["subject_id", "inserted_at", "id"],
        "ix_memories_room_order": ["chat_room_id", "inserted_at", "id"],
    }.items():
        op.create_index(name, "memories", columns)
    op.create_table(
        "server_secrets",
        sa.Column("name", sa.String(50), primary_key=True),
        sa.Column("value", sa.LargeBinary(), nullable=False),
    )
    _create_search_index()


def _create_search_index() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute(
            "CREATE VIRTUAL TABLE memories_fts USING fts5(search_text, content='memories', "
            "content_rowid='pk', tokenize='unicode61 remove_diacritics 0')"
        )
        op.execute(
            "CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN "
            "INSERT INTO memories_fts(rowid, search_text) VALUES (new.pk, new.search_text); END"
        )
        op.execute(
            "CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN "
            "INSERT INTO memories_fts(memories_fts, rowid, search_text) "
            "VALUES ('delete', old.pk, old.search_text); END"
        )
        op.execute(
            "CREATE TRIGGER memories_fts_au AFTER UPDATE OF search_text ON memories BEGIN "
            "INSERT INTO memories_fts(memories_fts, rowid, search_text) "
            "VALUES ('delete', old.pk, old.search_text); "
            "INSERT INTO memories_fts(rowid, search_text) VALUES (new.pk, new.search_text); END"
        )
    elif dialect == "postgresql":
        op.execute(
            "ALTER TABLE memories ADD COLUMN search tsvector GENERATED ALWAYS AS "
            "(to_tsvector('simple'::regconfig, search_text)) STORED"
        )
        op.execute("CREATE INDEX ix_memories_search ON memories USING gin (search)")
    else:  # pragma: no cover - guarded by the storage factory
        raise RuntimeError(f"unsupported database: {dialect}")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TABLE IF EXISTS memories_fts")
    for table in (
        "server_secrets",
        "memories",
        "chat_participants",
        "chat_rooms",
        "api_keys",
        "agents",
        "users",
        "organizations",
    ):
        op.drop_table(table)
