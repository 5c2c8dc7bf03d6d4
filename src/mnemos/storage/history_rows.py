"""History rows (`memory_history`), written inside the transaction of the change they record."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mnemos.domain.models import ChangedBy, HistoryEvent, Status
from mnemos.storage.schema import UTCDateTime, memories, memory_history


def history_row(
    tenant_id: uuid.UUID,
    memory_id: uuid.UUID,
    subject_id: uuid.UUID | None,
    event: HistoryEvent,
    by: ChangedBy,
    at: datetime,
    superseded_by: uuid.UUID | None = None,
) -> dict[str, Any]:
    """One row: what happened to which memory (of which tenant, about whom), who did it, when;
    no content."""
    return {
        "tenant_id": tenant_id,
        "memory_id": memory_id,
        "subject_id": subject_id,
        "event": event.value,
        "actor_type": by.type.value,
        "actor_id": by.id,
        "request_id": by.request_id,
        "superseded_by": superseded_by,
        "at": at,
    }


def record(conn: Connection, rows: Iterable[dict[str, Any]]) -> None:
    """Append history rows inside the caller's transaction."""
    batch = list(rows)
    if batch:
        conn.execute(memory_history.insert(), batch)


def status_change(status: Status, now: datetime) -> dict[str, Any]:
    """The values of an UPDATE that changes memories' status at `now` (every path: a status
    request, a supersede, a Tuya overwrite, retention). `updated_at` never moves back: a change
    takes its time before it waits for the row, so the one committed second may carry the
    earlier time; it keeps the later one then. Its history row keeps `now`, its own time."""
    at = sa.literal(now, UTCDateTime())
    updated = memories.c.updated_at
    return {"status": status.value, "updated_at": sa.case((updated > at, updated), else_=at)}
