"""Storage backends, chosen by URL scheme from one table; drivers are imported only when used."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy.engine import make_url

from mnemos.config import Settings
from mnemos.errors import DatabaseMissing, SchemaNewer
from mnemos.storage.base import Store

__all__ = [
    "BACKENDS",
    "Backend",
    "Store",
    "alembic_config",
    "backend",
    "check_settings",
    "database_revision",
    "known_revision",
    "migrate",
    "open_store",
    "require_database",
    "schema_newer",
]


def _open_sqlite(url: str, settings: Settings) -> Store:
    from mnemos.storage.sqlite import SqliteStore

    return SqliteStore(
        url,
        pool_size=settings.db_pool_size,
        synchronous=settings.sqlite_synchronous,
        search_budget_ms=settings.search_budget_ms,
    )


def _open_postgres(url: str, settings: Settings) -> Store:
    from mnemos.storage.postgres import PostgresStore

    return PostgresStore(
        url,
        pool_size=settings.db_pool_size,
        search_budget_ms=settings.search_budget_ms,
        replica_urls=settings.replica_urls(),
        replica_max_lag=settings.replica_max_lag_seconds,
    )


def _sqlite_directory(url: str) -> None:
    """Alembic creates the database file, but not the directory it goes in."""
    path = make_url(url).database
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)


def _sqlite_file_exists(url: str) -> bool:
    """A file with something in it: SQLite takes an empty file for an empty database, but an
    operator's empty file is a failed copy or a truncated one, not the database they meant."""
    path = make_url(url).database
    if not path or path == ":memory:":
        return True
    file = Path(path)
    return file.is_file() and file.stat().st_size > 0


def _postgres_database_exists(url: str) -> bool:
    """False only when the server answers that the database does not exist (SQLSTATE 3D000);
    any other failure to connect is left to the command, which reports it."""
    import sqlalchemy as sa

    engine = sa.create_engine(_postgres_driver_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect():
            return True
    except sa.exc.OperationalError as exc:
        said = str(exc.orig)
        missing = 'database "' in said and "does not exist" in said
        return not (getattr(exc.orig, "sqlstate", None) == "3D000" or missing)
    finally:
        engine.dispose()


def _postgres_driver_url(url: str) -> str:
    from mnemos.storage.postgres import driver_url

    return driver_url(url)


def _as_given(url: str) -> str:
    return url


def _nothing(url: str) -> None:  # noqa: ARG001 - the shape every `prepare` has
    return None


def _answers_for_itself(url: str) -> bool:  # noqa: ARG001 - the shape every `exists` has
    return True


@dataclass(frozen=True)
class Backend:
    """Everything that differs between kinds of database outside the store classes."""

    open: Callable[[str, Settings], Store]
    worker_threads: int
    """Default request threads (measured: see `Settings.resolved_worker_threads`)."""
    prepare: Callable[[str], None] = _nothing
    """Run before migrating."""
    migration_url: Callable[[str], str] = _as_given
    """The URL SQLAlchemy (and so Alembic) needs for a URL as users write it."""
    replicas: bool = False
    """Whether it can read from replicas (`MNEMOS_DATABASE_REPLICA_URLS`)."""
    exists: Callable[[str], bool] = _answers_for_itself
    """Whether the database is there, without creating it (a server refuses a missing one)."""
    one_writer: bool = False
    """Whether one write transaction at a time holds the whole database (`api/writer_gate.py`)."""


SQLITE = Backend(
    open=_open_sqlite,
    worker_threads=2,
    prepare=_sqlite_directory,
    exists=_sqlite_file_exists,
    one_writer=True,
)
POSTGRES = Backend(
    open=_open_postgres,
    worker_threads=1,
    migration_url=_postgres_driver_url,
    replicas=True,
    exists=_postgres_database_exists,
)

BACKENDS: dict[str, Backend] = {
    "sqlite": SQLITE,
    "postgresql": POSTGRES,
    "postgres": POSTGRES,
    "postgresql+psycopg": POSTGRES,
}


def backend(url: str) -> Backend:
    """The backend for a database URL, by its scheme (the only place that reads the scheme)."""
    scheme = url.partition("://")[0]
    if scheme not in BACKENDS:
        known = ", ".join(sorted(BACKENDS))
        raise ValueError(f"unsupported database URL scheme {scheme!r} (known: {known})")
    return BACKENDS[scheme]


def check_settings(settings: Settings) -> None:
    """Refuse settings no backend or not the chosen one can honour (`ValueError`, saying why):
    an unknown URL scheme, read replicas on a backend without them."""
    url = settings.resolved_database_url()
    chosen = backend(url)
    if settings.replica_urls():
        if not chosen.replicas:
            raise ValueError(
                "MNEMOS_DATABASE_REPLICA_URLS needs a PostgreSQL MNEMOS_DATABASE_URL "
                f"({url.partition(':')[0]} has no read replicas)"
            )
        for replica in settings.replica_urls():
            if backend(replica) is not chosen:
                raise ValueError("every MNEMOS_DATABASE_REPLICA_URLS entry must be postgresql://")


def open_store(settings: Settings) -> Store:
    """The store for `settings.database_url` (the SQLite default when unset)."""
    check_settings(settings)
    url = settings.resolved_database_url()
    return backend(url).open(url, settings)


def require_database(settings: Settings) -> None:
    """Refuse to go on when the database is not there: an operator's command on a mistyped
    SQLite path would otherwise create an empty database and report on it (an erasure of 0
    memories, an empty export) as if it were the real one."""
    url = settings.resolved_database_url()
    if not backend(url).exists(url):
        shown = make_url(url).render_as_string(hide_password=True)
        raise DatabaseMissing(
            f"No database at {shown}: check --database-url, MNEMOS_DATABASE_URL or "
            "MNEMOS_DATA_DIR, or create it with `mnemos migrate`"
        )


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(resources.files("mnemos") / "migrations"))
    config.set_main_option("sqlalchemy.url", backend(url).migration_url(url).replace("%", "%%"))
    return config


def known_revision(url: str, revision: str | None) -> bool:
    """Whether this Mnemos's migrations know schema `revision` (None: no schema yet)."""
    if revision is None:
        return True
    try:
        return ScriptDirectory.from_config(alembic_config(url)).get_revision(revision) is not None
    except CommandError:
        return False


def schema_newer(revision: str | None) -> SchemaNewer:
    """The refusal of a database at a revision this Mnemos does not know: a newer one's."""
    return SchemaNewer(
        f"The database was migrated by a newer Mnemos (revision {revision}): upgrade Mnemos "
        "on this host",
        {"revision": revision},
    )


def database_revision(url: str) -> str | None:
    """The database's schema revision (None: not created or migrated yet)."""
    engine = sa.create_engine(backend(url).migration_url(url))
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def migrate(settings: Settings, revision: str = "head") -> None:
    """Create or upgrade the database schema with Alembic; a schema a newer Mnemos migrated is
    `SchemaNewer` (this one neither downgrades nor serves it: its migrations cannot say what
    the newer ones changed)."""
    url = settings.resolved_database_url()
    backend(url).prepare(url)
    current = database_revision(url)
    if not known_revision(url, current):
        raise schema_newer(current)
    command.upgrade(alembic_config(url), revision)
