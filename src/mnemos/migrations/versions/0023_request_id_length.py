"""PostgreSQL: a change's request id holds every `X-Request-ID` the API keeps (128 characters).

The API keeps an incoming well-formed `X-Request-ID` of up to 128 characters and every change
records it, but `memory_history.request_id` and `erasures.request_id` were `VARCHAR(64)`: on
PostgreSQL a client sending a longer id made each of its writes fail (500). Widening a
`VARCHAR` rewrites nothing on PostgreSQL; SQLite does not enforce the length.

Revision ID: 0023_request_id_length
Revises: 0022_vector_queue_order
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "0023_request_id_length"
down_revision = "0022_vector_queue_order"
branch_labels = None
depends_on = None

TABLES = ("memory_history", "erasures")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN request_id TYPE VARCHAR(128)")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TABLES:  # ids longer than 64 characters are cut to fit
        op.execute(
            f"ALTER TABLE {table} ALTER COLUMN request_id TYPE VARCHAR(64) "
            "USING left(request_id, 64)"
        )
