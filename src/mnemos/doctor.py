"""`mnemos doctor`: what an operator checks first, each check a finding (ok, warn or problem).

- configuration: the `MNEMOS_*` settings parse, and what they amount to;
- database: it answers;
- migrations: the database's Alembic revision is this Mnemos's head;
- search index: SQLite: the FTS5 index passes its own `integrity-check` and holds one entry per
  memory; PostgreSQL: the generated `search` column and its GIN index exist and the index is
  valid;
- clock: Tuya requests are signed with the caller's time `t`, refused more than 5 minutes from
  this host's clock, and Tuya tokens and replay records carry expiry times written by whichever
  Mnemos process handled the request. So every Mnemos host must keep good time: the check
  compares this host's clock with the database server's (`clock_timestamp()`, half the round
  trip allowed for), the one clock all hosts of a PostgreSQL deployment share. SQLite runs on
  this host's clock alone: nothing to compare;
- vectors: the models of the stored vectors against this server's embedder's (`MNEMOS_EMBEDDER`,
  built as `serve` builds it): a database reindexed under another embedder answers searches by
  meaning with nothing, and only `mnemos reindex --switch-model` (or serving with the other
  embedder) mends it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import sqlalchemy as sa
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection, make_url

from mnemos.config import Settings, load_settings
from mnemos.domain.recall import models_apart
from mnemos.domain.tuya_auth import MAX_SKEW_MS
from mnemos.embedding import embedder_from_settings
from mnemos.errors import MnemosError, ValidationFailed
from mnemos.storage import alembic_config, backend, known_revision, schema_newer
from mnemos.storage.sql_base import EVERY_TENANT

Level = Literal["ok", "warn", "problem"]
CLOCK_TOLERANCE_S = MAX_SKEW_MS / 1000 / 10  # a tenth of the Tuya window: 30 s


@dataclass(frozen=True)
class Finding:
    check: str
    level: Level
    detail: str

    def as_json(self) -> dict[str, str]:
        return {"check": self.check, "level": self.level, "detail": self.detail}


def examine(**overrides: Any) -> list[Finding]:
    """Every check, in order; later checks are skipped when the database cannot be reached."""
    try:
        settings = load_settings(**overrides)  # what `serve` refuses, checked as it checks
    except ValidationFailed as exc:
        return [Finding("configuration", "problem", exc.message)]
    url = settings.resolved_database_url()
    findings = [_configuration(settings)]
    if not backend(url).exists(url):  # connecting would create it
        findings.append(Finding("database", "problem", f"no database at {_redacted(url)}"))
        return findings
    engine = sa.create_engine(backend(url).migration_url(url))
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
            findings.append(Finding("database", "ok", f"reachable ({_redacted(url)})"))
            for check in CHECKS:
                findings.append(_guarded(check, conn))
            findings.append(_guarded(lambda conn: _vectors(conn, settings), conn, "vectors"))
    except sa.exc.SQLAlchemyError as exc:
        reason = str(exc.orig if hasattr(exc, "orig") else exc).strip()[:200]
        findings.append(Finding("database", "problem", f"unreachable: {reason}"))
    finally:
        engine.dispose()
    return findings


def _redacted(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def _configuration(settings: Settings) -> Finding:
    notes = [f"backend {make_url(settings.resolved_database_url()).get_backend_name()}"]
    level: Level = "ok"
    if settings.metrics:
        notes.append("metrics on" + (" (token)" if settings.metrics_token else " (no token)"))
    notes.append(f"logs {settings.log_format} at {settings.log_level}")
    if settings.rate_limit_per_minute == 0:
        level = "warn"
        notes.append("rate limits off")
    return Finding("configuration", level, ", ".join(notes))


def _guarded(
    check: Callable[[Connection], Finding], conn: Connection, name: str | None = None
) -> Finding:
    try:
        return check(conn)
    except sa.exc.SQLAlchemyError as exc:
        if conn.in_transaction():
            conn.rollback()
        name = name or check.__name__.strip("_")
        return Finding(name, "problem", str(getattr(exc, "orig", exc)).strip()[:200])


def _migrations(conn: Connection) -> Finding:
    current = MigrationContext.configure(conn).get_current_revision()
    head = ScriptDirectory.from_config(alembic_config(str(conn.engine.url))).get_current_head()
    if current == head:
        return Finding("migrations", "ok", f"at head ({head})")
    if not known_revision(str(conn.engine.url), current):  # `mnemos migrate` would refuse it
        return Finding("migrations", "problem", f"{schema_newer(current).message} (head {head})")
    return Finding("migrations", "problem", f"at {current}, head is {head}: run `mnemos migrate`")


def _search_index(conn: Connection) -> Finding:
    # The operator's check of the whole database: every tenant's.
    every = f"SELECT {EVERY_TENANT} count(*) FROM memories"
    memories = conn.execute(sa.text(every)).scalar_one()
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("INSERT INTO memories_fts(memories_fts) VALUES ('integrity-check')")
        indexed = conn.execute(sa.text("SELECT count(*) FROM memories_fts_docsize")).scalar_one()
        conn.rollback()
        if indexed != memories:
            return Finding(
                "search_index", "problem", f"FTS5 holds {indexed} entries for {memories} memories"
            )
        return Finding("search_index", "ok", f"FTS5 sound, {indexed} memories indexed")
    valid = conn.execute(
        sa.text(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = 'ix_memories_search'"
        )
    ).scalar()
    conn.rollback()
    if valid is None:
        return Finding("search_index", "problem", "index ix_memories_search is missing")
    if not valid:
        return Finding("search_index", "problem", "ix_memories_search is invalid: REINDEX it")
    return Finding("search_index", "ok", f"tsvector GIN index valid, {memories} memories")


def _clock(conn: Connection) -> Finding:
    if conn.dialect.name == "sqlite":
        return Finding("clock", "ok", "SQLite: this host's clock only, nothing to compare")
    sent = time.time()
    server: datetime = conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
    received = time.time()
    conn.rollback()
    skew = server.astimezone(UTC).timestamp() - (sent + received) / 2
    detail = f"this host is {-skew:+.3f} s from the database server's clock"
    if abs(skew) > CLOCK_TOLERANCE_S:
        return Finding("clock", "problem", f"{detail} (Tuya allows {MAX_SKEW_MS // 1000} s)")
    return Finding("clock", "ok", detail)


def _vectors(conn: Connection, settings: Settings) -> Finding:
    try:
        embedder = embedder_from_settings(settings)
    except MnemosError as exc:  # an endpoint that does not answer, local weights missing
        return Finding("vectors", "problem", f"the embedder cannot be built: {exc.message}")
    every = f"SELECT {EVERY_TENANT} DISTINCT model FROM memory_vectors ORDER BY model"
    held = list(conn.execute(sa.text(every)).scalars())
    conn.rollback()
    if embedder is None:
        stored = f" (vectors of {', '.join(held)} stored)" if held else ""
        return Finding("vectors", "ok", f"no embedder: search by words only{stored}")
    note = models_apart(held, embedder.model)
    if note is None:
        return Finding("vectors", "ok", f"{embedder.model}" + ("" if held else ", none yet"))
    # Some memories are still found by meaning (`warn`), or none are (`problem`).
    return Finding("vectors", "warn" if embedder.model in held else "problem", note)


CHECKS = (_migrations, _search_index, _clock)
