"""Tuya: one active value per key (a partial unique index) and a seen-signature table.

`memories.tuya_slot` names a Tuya memory's key with its scope's owner (`1:<key>` for a
device's global memory, `3:<agent id>:<key>` for a role's). Existing Tuya memories get theirs
from their metadata; where a key already holds several active values (the bug this fixes), the
newest stays active and the others become superseded, so the unique index can be built.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import sqlalchemy as sa
from alembic import op

from mnemos.storage.schema import ACTIVE_TUYA_SLOT, TUYA_SLOT_LENGTH, UTCDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

memories = sa.table(
    "memories",
    sa.column("pk", sa.Integer()),
    sa.column("subject_id", sa.Uuid()),
    sa.column("source_agent_id", sa.Uuid()),
    sa.column("metadata", sa.JSON()),
    sa.column("status", sa.String()),
    sa.column("inserted_at", UTCDateTime()),
    sa.column("tuya_slot", sa.String()),
)


def _slot(metadata: Any, agent: uuid.UUID | None) -> str | None:
    if isinstance(metadata, str):
        metadata = json.loads(metadata)
    meta = metadata.get("tuya") if isinstance(metadata, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("memory_key"), str):
        return None
    scope, key = meta.get("effective_scope"), meta["memory_key"]
    if scope == 1 and type(scope) is int:
        return f"1:{key}"
    if scope == 3 and type(scope) is int and agent is not None:
        return f"3:{agent}:{key}"
    return None


def _backfill() -> None:
    conn = op.get_bind()
    m = memories.c
    rows = conn.execute(
        sa.select(m.pk, m.subject_id, m.source_agent_id, m.metadata, m.status)
        .where(sa.cast(m.metadata, sa.Text).like('%"tuya"%'), m.subject_id.is_not(None))
        .order_by(m.inserted_at.desc(), m.pk.desc())
    ).all()
    active: set[tuple[uuid.UUID, str]] = set()
    for pk, subject, agent, metadata, status in rows:
        slot = _slot(metadata, agent)
        if slot is None or len(slot) > TUYA_SLOT_LENGTH:
            continue
        values: dict[str, Any] = {"tuya_slot": slot}
        if status == "active":
            if (subject, slot) in active:  # an older duplicate: the newest value wins
                values["status"] = "superseded"
            active.add((subject, slot))
        conn.execute(memories.update().where(m.pk == pk).values(**values))


def upgrade() -> None:
    op.add_column("memories", sa.Column("tuya_slot", sa.String(TUYA_SLOT_LENGTH), nullable=True))
    _backfill()
    op.create_index(
        "uq_memories_tuya_slot_active",
        "memories",
        ["subject_id", "tuya_slot"],
        unique=True,
        sqlite_where=ACTIVE_TUYA_SLOT,
        postgresql_where=ACTIVE_TUYA_SLOT,
    )
    op.create_table(
        "tuya_signatures",
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_tuya_signatures_expires_at", "tuya_signatures", ["expires_at"])


def downgrade() -> None:
    op.drop_table("tuya_signatures")
    op.drop_index("uq_memories_tuya_slot_active", table_name="memories")
    op.drop_column("memories", "tuya_slot")
