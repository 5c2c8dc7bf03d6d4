"""The tables, shared by every backend; Alembic migrations create them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from mnemos.domain.history import REQUEST_ID_LENGTH

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
    }
)


class UTCDateTime(sa.TypeDecorator[datetime]):
    """Aware UTC datetimes; SQLite keeps a fixed-width text that sorts in time order."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:  # noqa: ARG002
        if not isinstance(value, datetime):
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    # SQLite keeps the text SQLAlchemy's DATETIME writes ("2026-11-30 06:06:30.123456"). Reading
    # it with `datetime.fromisoformat` (C) instead of the dialect's regular expression roughly
    # halves the cost of every listed timestamp; other dialects keep the generic path.
    def result_processor(self, dialect: Dialect, coltype: Any) -> Any:
        if dialect.name != "sqlite":
            return super().result_processor(dialect, coltype)
        parse = datetime.fromisoformat

        def process(value: str | None) -> datetime | None:
            return None if value is None else parse(value).replace(tzinfo=UTC)

        return process


PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

organizations = sa.Table(
    "organizations",
    metadata,
    sa.Column("id", sa.Uuid(), primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("memory_enabled", sa.Boolean(), nullable=False, server_default=sa.true()),
    sa.Column("inserted_at", UTCDateTime(), nullable=False),
)

users = sa.Table(
    "users",
    metadata,
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
    sa.Column("inserted_at", UTCDateTime(), nullable=False),
    sa.Column("updated_at", UTCDateTime(), nullable=False),
    # Bearer tokens issued at or before this moment are refused (`mnemos admin revoke-tokens`).
    sa.Column("tokens_valid_after", UTCDateTime(), nullable=True),
)

agents = sa.Table(
    "agents",
    metadata,
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
    sa.Column("inserted_at", UTCDateTime(), nullable=False),
    sa.Column("updated_at", UTCDateTime(), nullable=False),
)

api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("key_hash", sa.String(64), primary_key=True),
    sa.Column("kind", sa.String(10), nullable=False),
    sa.Column("principal_id", sa.Uuid(), nullable=False, index=True),
    sa.Column("inserted_at", UTCDateTime(), nullable=False),
    sa.Column("revoked_at", UTCDateTime(), nullable=True),
)

chat_rooms = sa.Table(
    "chat_rooms",
    metadata,
    sa.Column("id", sa.Uuid(), primary_key=True),
    sa.Column("title", sa.String(300), nullable=True),
    sa.Column("type", sa.String(20), nullable=False),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("owner_type", sa.String(10), nullable=False),
    sa.Column("owner_id", sa.Uuid(), nullable=False),
    sa.Column("inserted_at", UTCDateTime(), nullable=False),
    sa.Column("updated_at", UTCDateTime(), nullable=False),
)

chat_participants = sa.Table(
    "chat_participants",
    metadata,
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
    sa.Index("ix_chat_participants_member", "participant_id", "chat_room_id"),
)

TUYA_SLOT_LENGTH = 160
ACTIVE_TUYA_SLOT = sa.text("status = 'active' AND tuya_slot IS NOT NULL")

# --- memory-side tables -----------------------------------------------------------------------
# Each row carries its tenant (`tenant_id`: the organization, or the person without one;
# `domain/tenants.py`), which leads every primary key and unique constraint, so that Citus can
# distribute these tables by it (docs/deploying.md, "Sharding by tenant"). The tables above are
# accounts: small, reference tables there. SQLite keeps `pk` as its rowid (FTS5 and vectors key
# on it): there, the composite keys are unique indexes (migration 0018).
MEMORY_SIDE = (
    "memories",
    "memory_history",
    "idempotency_keys",
    "erasures",
    "memory_vectors",
    "vector_queue",
    "vector_tail",
    "vector_chunks",
)

memories = sa.Table(
    "memories",
    metadata,
    sa.Column("pk", PK, autoincrement=True, nullable=False),
    sa.Column("id", sa.Uuid(), nullable=False),
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
    sa.Column("inserted_at", UTCDateTime(), nullable=False),
    sa.Column("updated_at", UTCDateTime(), nullable=False),
    # A Tuya memory's key with its scope's owner ("1:<key>", "3:<agent id>:<key>"), set only by
    # the Tuya API; null for every other memory.
    sa.Column("tuya_slot", sa.String(TUYA_SLOT_LENGTH), nullable=True),
    sa.Column("tenant_id", sa.Uuid(), nullable=False),
    sa.PrimaryKeyConstraint("tenant_id", "pk"),
    sa.UniqueConstraint("tenant_id", "id"),
    # By id alone (PostgreSQL; SQLite's unique index on it stays): a person's GET reaches
    # their tenants and those holding memories about them, and `memory_exists` every tenant.
    sa.Index("ix_memories_id", "id"),
    sa.Index("ix_memories_agent_order", "source_agent_id", "inserted_at", "id"),
    sa.Index("ix_memories_org_order", "organization_id", "scope", "inserted_at", "id"),
    sa.Index("ix_memories_subject_scope_order", "subject_id", "scope", "inserted_at", "id"),
    sa.Index("ix_memories_room_order", "chat_room_id", "inserted_at", "id"),
    # One active value per Tuya key and scope of a device, whoever writes and however.
    sa.Index(
        "uq_memories_tuya_slot_active",
        "tenant_id",
        "subject_id",
        "tuya_slot",
        unique=True,
        sqlite_where=ACTIVE_TUYA_SLOT,
        postgresql_where=ACTIVE_TUYA_SLOT,
    ),
)

server_secrets = sa.Table(
    "server_secrets",
    metadata,
    sa.Column("name", sa.String(50), primary_key=True),
    sa.Column("value", sa.LargeBinary(), nullable=False),
)

# Read replicas (PostgreSQL): the primary's WAL position after each tenant's latest write, which
# that tenant's reads must see (`mnemos.storage.replicas`). Unlogged there (migration 0009): no
# WAL, no fsync, not replicated (only the primary reads it). A crash of the primary empties it;
# replicas in rotation still hold everything older than the lag bound (docs/decisions.md).
write_marks = sa.Table(
    "write_marks",
    metadata,
    sa.Column("tenant", sa.String(64), primary_key=True),
    sa.Column("lsn", sa.BigInteger(), nullable=False),
)

tuya_projects = sa.Table(
    "tuya_projects",
    metadata,
    sa.Column("client_id", sa.String(64), primary_key=True),
    # An HMAC key, so it must be kept readable: the server recomputes every request's signature.
    sa.Column("client_secret", sa.String(128), nullable=False),
    sa.Column(
        "organization_id",
        sa.Uuid(),
        sa.ForeignKey("organizations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("inserted_at", UTCDateTime(), nullable=False),
)

tuya_tokens = sa.Table(
    "tuya_tokens",
    metadata,
    sa.Column("token_hash", sa.String(64), primary_key=True),
    sa.Column("kind", sa.String(10), nullable=False),
    sa.Column("pair_id", sa.Uuid(), nullable=False, index=True),
    sa.Column("client_id", sa.String(64), nullable=False),
    sa.Column("expires_at", UTCDateTime(), nullable=False),
)

# Signatures of accepted Tuya requests, kept until their timestamp leaves the accepted window,
# so the same signed request is refused when sent again (from any process).
tuya_signatures = sa.Table(
    "tuya_signatures",
    metadata,
    sa.Column("digest", sa.String(64), primary_key=True),
    sa.Column("expires_at", UTCDateTime(), nullable=False, index=True),
)

# Web-page sessions ended by Sign out before they expire (`domain/sessions.py`): a copy of the
# cookie is refused from then on. Kept until the session would have expired anyway.
ended_sessions = sa.Table(
    "ended_sessions",
    metadata,
    sa.Column("session_id", sa.String(64), primary_key=True),
    sa.Column("expires_at", UTCDateTime(), nullable=False, index=True),
)

# The ordered answer of a search with more than one page (`domain/recall.py`): its later pages
# read the next ids from here, so they neither repeat nor skip. `ranked` is 24 bytes per memory
# (16 of id, 8 of score, little-endian double). Kept until `expires_at`, or until its owner has
# kept `KEPT_PER_CALLER` newer ones.
search_pages = sa.Table(
    "search_pages",
    metadata,
    sa.Column("search_id", sa.String(64), primary_key=True),
    sa.Column("expires_at", UTCDateTime(), nullable=False, index=True),
    sa.Column("ranked", sa.LargeBinary(), nullable=False),
    # Who searched (an agent or a person, `domain/recall.py`): each keeps at most
    # `KEPT_PER_CALLER` answers, its oldest going first (migration 0017).
    sa.Column("owner", sa.String(64), nullable=False, server_default=""),
    sa.Index("ix_search_pages_owner", "owner", "expires_at"),
)

tuya_devices = sa.Table(
    "tuya_devices",
    metadata,
    sa.Column("device_id", sa.String(64), primary_key=True),
    sa.Column("organization_id", sa.Uuid(), nullable=False),
    sa.Column("subject_id", sa.Uuid(), nullable=False, unique=True),
    sa.Column("inserted_at", UTCDateTime(), nullable=False),
)

tuya_roles = sa.Table(
    "tuya_roles",
    metadata,
    sa.Column("organization_id", sa.Uuid(), primary_key=True),
    sa.Column("role_id", sa.String(64), primary_key=True),
    sa.Column(
        "agent_id", sa.Uuid(), sa.ForeignKey("agents.id", ondelete="CASCADE"), nullable=False
    ),
)

idempotency_keys = sa.Table(
    "idempotency_keys",
    metadata,
    sa.Column("tenant_id", sa.Uuid(), primary_key=True),
    sa.Column("principal_id", sa.Uuid(), primary_key=True),
    sa.Column("key", sa.String(255), primary_key=True),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("memory_id", sa.Uuid(), nullable=False),
    sa.Column("inserted_at", UTCDateTime(), nullable=False),
    # The server forgets keys past their day in batches, oldest first (`forget_idempotency_keys`).
    sa.Index("ix_idempotency_keys_inserted_at", "inserted_at"),
    # An erasure deletes the keys of the memories it deletes (`sql_rights.keys_of_memories`).
    sa.Index("ix_idempotency_keys_memory", "tenant_id", "memory_id"),
)

# --- recall by meaning (docs/search.md, "Vector storage") -----------------------------------
# Every memory's vector, int8-quantised (`scale` turns it back into the unit vector), with the
# model that made it. A memory waits in `vector_queue` (a trigger adds it, in the transaction
# that inserts it) until a process embeds it. Searches read vectors per owner (agent,
# organization, subject, room): sealed `vector_chunks` of CHUNK_ROWS vectors each (keys, int8
# vectors and their sign bits), plus the owner's `vector_tail`, the vectors not yet sealed.

# `memory_vectors` and `vector_queue` name their memory by `memory_pk` without a foreign key on
# PostgreSQL (migration 0013: its cascade ran once per deleted memory): the one delete path of
# memories deletes their rows by set (`SqlBase._delete_memories`). SQLite keeps the constraint.
memory_vectors = sa.Table(
    "memory_vectors",
    metadata,
    sa.Column("tenant_id", sa.Uuid(), primary_key=True),  # the memory's
    sa.Column("memory_pk", PK, primary_key=True),
    sa.Column("model", sa.Text(), nullable=False),  # migrations 0026 and 0029
    sa.Column("scale", sa.Float(), nullable=False),
    sa.Column("vector", sa.LargeBinary(), nullable=False),
)

vector_queue = sa.Table(
    "vector_queue",
    metadata,
    sa.Column("tenant_id", sa.Uuid(), primary_key=True),  # the memory's
    sa.Column("memory_pk", PK, primary_key=True),
    # A process embedding this memory holds it until then; past it, anyone may take it over.
    sa.Column("claimed_until", UTCDateTime(), nullable=True),
    # How often the embedder refused this memory's text (migration 0026): at `MAX_REFUSALS` it
    # is set aside, never claimed, until `mnemos reindex` tries it again.
    sa.Column("refusals", sa.SmallInteger(), nullable=False, server_default="0"),
    # PostgreSQL also indexes `memory_pk` alone (`ix_vector_queue_order`, migration 0022): the
    # claim's newest first; SQLite's `memory_pk` is the rowid. The claim's round over tenants
    # walks `(tenant_id, memory_pk)`: the key on PostgreSQL, `uq_vector_queue_tenant_key` on
    # SQLite (migration 0019).
)

# The search layout, per tenant and owner (migration 0019): a chunk never mixes tenants.
vector_tail = sa.Table(
    "vector_tail",
    metadata,
    sa.Column("tenant_id", sa.Uuid(), primary_key=True),
    sa.Column("owner", sa.String(40), primary_key=True),
    sa.Column("memory_pk", PK, primary_key=True),
    sa.ForeignKeyConstraint(
        ["tenant_id", "memory_pk"],
        ["memory_vectors.tenant_id", "memory_vectors.memory_pk"],
        ondelete="CASCADE",
    ),
    sa.Index("ix_vector_tail_memory_pk", "tenant_id", "memory_pk"),
)

vector_chunks = sa.Table(
    "vector_chunks",
    metadata,
    sa.Column("tenant_id", sa.Uuid(), primary_key=True),
    sa.Column("owner", sa.String(40), primary_key=True),
    sa.Column("seq", sa.Integer(), primary_key=True),
    sa.Column("model", sa.Text(), nullable=False),  # migrations 0026 and 0029
    sa.Column("rows", sa.Integer(), nullable=False),
    sa.Column("pks", sa.LargeBinary(), nullable=False),  # int64, little-endian
    # The vectors' sign bits, packed (numpy.packbits): rows x dimensions / 8 bytes; a search
    # reads these and the keys only (migration 0014), kept in the row on PostgreSQL (STORAGE
    # MAIN, migration 0021), next to the keys on SQLite (migration 0024: a read of them stops
    # before the vectors' overflow pages).
    sa.Column("bits", sa.LargeBinary(), nullable=False),
    sa.Column("scales", sa.LargeBinary(), nullable=False),  # float32
    sa.Column("vectors", sa.LargeBinary(), nullable=False),  # int8, rows x dimensions
)

# --- people's rights (migration 0011): history of changes, erasures, retention ---------------

# One row per change of a memory: what happened, who did it, when, in which request. Never the
# content (an erasure must leave none behind). `subject_id` copies the memory's, so erasing a
# person also finds the history of memories about them deleted earlier.
memory_history = sa.Table(
    "memory_history",
    metadata,
    sa.Column("tenant_id", sa.Uuid(), primary_key=True),
    sa.Column("pk", PK, primary_key=True, autoincrement=True),
    sa.Column("memory_id", sa.Uuid(), nullable=False),
    sa.Column("subject_id", sa.Uuid(), nullable=True, index=True),
    sa.Column("event", sa.String(16), nullable=False),
    sa.Column("actor_type", sa.String(16), nullable=False),
    sa.Column("actor_id", sa.String(64), nullable=True),
    sa.Column("request_id", sa.String(REQUEST_ID_LENGTH), nullable=True),
    sa.Column("superseded_by", sa.Uuid(), nullable=True),
    sa.Column("at", UTCDateTime(), nullable=False),
    sa.Index("ix_memory_history_memory", "memory_id", "pk"),
)

# One row per erasure of what is about a person: who asked, when, how many (no content).
erasures = sa.Table(
    "erasures",
    metadata,
    sa.Column("tenant_id", sa.Uuid(), primary_key=True),  # the person's (`domain/tenants.py`)
    sa.Column("id", sa.Uuid(), primary_key=True),
    sa.Column("subject_id", sa.Uuid(), nullable=False, index=True),
    sa.Column("actor_type", sa.String(16), nullable=False),
    sa.Column("actor_id", sa.String(64), nullable=True),
    sa.Column("request_id", sa.String(REQUEST_ID_LENGTH), nullable=True),
    sa.Column("erased", sa.Integer(), nullable=False),
    sa.Column("at", UTCDateTime(), nullable=False),
)

# Which tenants hold memories (or their history) about a subject: a person's "about me" view
# and their rights (export, erasure) read those tenants only. Written with the memory (an
# insert that ignores a known pair); kept after the memories go (it holds no content). In
# Citus, distributed by `subject_id` (not co-located: read first, as a subquery).
subject_tenants = sa.Table(
    "subject_tenants",
    metadata,
    sa.Column("subject_id", sa.Uuid(), primary_key=True),
    sa.Column("tenant_id", sa.Uuid(), primary_key=True),
)

# How long an organization keeps its `working` and `sensory` memories (`mnemos admin
# set-retention`); expired ones are archived by the server (docs/privacy.md).
retention_policies = sa.Table(
    "retention_policies",
    metadata,
    sa.Column(
        "organization_id",
        sa.Uuid(),
        sa.ForeignKey("organizations.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("system", sa.String(16), primary_key=True),
    sa.Column("days", sa.Integer(), nullable=False),
)
