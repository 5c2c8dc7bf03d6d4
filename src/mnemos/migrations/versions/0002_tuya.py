"""Tuya projects, access tokens, devices and role bindings.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from mnemos.storage.schema import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tuya_projects",
        sa.Column("client_id", sa.String(64), primary_key=True),
        sa.Column("client_secret", sa.String(128), nullable=False),
        sa.Column(
            "organization_id",
            sa.Uuid(),
            sa.ForeignKey("organizations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("inserted_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "tuya_tokens",
        sa.Column("token_hash", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(10), nullable=False),
        sa.Column("pair_id", sa.Uuid(), nullable=False, index=True),
        sa.Column("client_id", sa.String(64), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "tuya_devices",
        sa.Column("device_id", sa.String(64), primary_key=True),
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("subject_id", sa.Uuid(), nullable=False, unique=True),
        sa.Column("inserted_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "tuya_roles",
        sa.Column("organization_id", sa.Uuid(), primary_key=True),
        sa.Column("role_id", sa.String(64), primary_key=True),
        sa.Column(
            "agent_id", sa.Uuid(), sa.ForeignKey("agents.id", ondelete="CASCADE"), nullable=False
        ),
    )


def downgrade() -> None:
    for table in ("tuya_roles", "tuya_devices", "tuya_tokens", "tuya_projects"):
        op.drop_table(table)
