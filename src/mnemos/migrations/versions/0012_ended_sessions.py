"""Web-page sessions ended by Sign out: `ended_sessions`, so a copy of the cookie is refused.

Revision ID: 0012_ended_sessions
Revises: 0011_history
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from mnemos.storage.schema import UTCDateTime

revision = "0012_ended_sessions"
down_revision = "0011_history"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ended_sessions",
        sa.Column("session_id", sa.String(64), primary_key=True),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_ended_sessions_expires_at", "ended_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_table("ended_sessions")
