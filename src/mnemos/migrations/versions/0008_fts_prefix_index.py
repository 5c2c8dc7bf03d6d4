"""SQLite: the full-text index also indexes 3- and 4-character prefixes of every word.

A prefix term (`"har"*`) without a prefix index makes FTS5 merge the entries of every word that
starts with it before it can intersect anything: at 300,000 memories a dense 3-letter prefix took
about 200-800 ms. With `prefix='3 4'` FTS5 keeps one entry per 3- and 4-character prefix, so those
terms cost what a single word costs (under 20 ms there). Prefixes of 1-2 characters are no longer
searched as prefixes at all (`mnemos.domain.search.MIN_PREFIX_CHARS`); longer ones match fewer
words and are left to the merge. A contentless FTS5 table cannot be altered or rebuilt from its
own content, so it is recreated and refilled from `memories`, with the scope tokens of 0005.
PostgreSQL is unchanged.

Revision ID: 0008
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TOKENIZE = "tokenize='unicode61 remove_diacritics 0'"
SCOPE = (
    "trim(coalesce(' zzag' || source_agent_id, '') "
    "|| coalesce(' zzorg' || organization_id, '') "
    "|| coalesce(' zzsub' || subject_id, '') "
    "|| coalesce(' zzroom' || chat_room_id, ''))"
)


def _recreate(options: str) -> None:
    """Recreate `memories_fts` with `options` and index every memory again. The triggers of
    migration 0005 name the table, not its options, so they keep working unchanged."""
    op.execute("DROP TABLE IF EXISTS memories_fts")
    op.execute(f"CREATE VIRTUAL TABLE memories_fts USING fts5(search_text, scope, {options})")
    op.execute(
        f"INSERT INTO memories_fts(rowid, search_text, scope) SELECT pk, search_text, {SCOPE} "
        "FROM memories"
    )


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _recreate(f"content='', prefix='3 4', {TOKENIZE}")


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _recreate(f"content='', {TOKENIZE}")
