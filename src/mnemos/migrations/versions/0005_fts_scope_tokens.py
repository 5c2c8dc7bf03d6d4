"""SQLite: the full-text index also holds each memory's owners, so a scoped search stays small.

The FTS5 table becomes contentless with two columns: `search_text` (the words, as before) and
`scope`, tokens naming the memory's source agent, organization, subject and chat room
(`zzag<hex>`, `zzorg<hex>`, `zzsub<hex>`, `zzroom<hex>`). A search scoped to one agent then
matches `{search_text}: terms AND {scope}: zzag<hex>` inside the index, instead of collecting
every memory with the term and filtering afterwards. The visibility filter still runs on the
memories themselves: the tokens only narrow the candidates. PostgreSQL is unchanged.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _scope(row: str) -> str:
    """The SQL for a row's scope tokens (UUIDs are 32 hex digits in SQLite)."""
    return (
        f"trim(coalesce(' zzag' || {row}.source_agent_id, '') "
        f"|| coalesce(' zzorg' || {row}.organization_id, '') "
        f"|| coalesce(' zzsub' || {row}.subject_id, '') "
        f"|| coalesce(' zzroom' || {row}.chat_room_id, ''))"
    )


def _index(row: str) -> str:
    return (
        "INSERT INTO memories_fts(rowid, search_text, scope) "
        f"VALUES ({row}.pk, {row}.search_text, {_scope(row)});"
    )


def _unindex(row: str) -> str:
    return (
        "INSERT INTO memories_fts(memories_fts, rowid, search_text, scope) "
        f"VALUES ('delete', {row}.pk, {row}.search_text, {_scope(row)});"
    )


def _drop_search_index() -> None:
    for trigger in ("memories_fts_ai", "memories_fts_ad", "memories_fts_au"):
        op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    op.execute("DROP TABLE IF EXISTS memories_fts")


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _drop_search_index()
    op.execute(
        "CREATE VIRTUAL TABLE memories_fts USING fts5(search_text, scope, content='', "
        "tokenize='unicode61 remove_diacritics 0')"
    )
    op.execute(
        "INSERT INTO memories_fts(rowid, search_text, scope) "
        f"SELECT pk, search_text, {_scope('memories')} FROM memories"
    )
    op.execute(f"CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN {_index('new')} END")
    op.execute(
        f"CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN {_unindex('old')} END"
    )
    op.execute(
        "CREATE TRIGGER memories_fts_au AFTER UPDATE OF search_text, source_agent_id, "
        "organization_id, subject_id, chat_room_id ON memories BEGIN "
        f"{_unindex('old')} {_index('new')} END"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _drop_search_index()
    op.execute(
        "CREATE VIRTUAL TABLE memories_fts USING fts5(search_text, content='memories', "
        "content_rowid='pk', tokenize='unicode61 remove_diacritics 0')"
    )
    op.execute("INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')")
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
