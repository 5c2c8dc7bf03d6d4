"""Storage backends, chosen by URL scheme; drivers are imported only when used."""

from __future__ import annotations

from importlib import resources

from alembic import command
from alembic.config import Config

from mnemos.config import Settings
from mnemos.storage.base import Store

SUPPORTED_SCHEMES = {
    "sqlite": "mnemos.storage.sqlite:SqliteStore",
    "postgresql": "mnemos.storage.postgres:PostgresStore",
    "postgres": "mnemos.storage.postgres:PostgresStore",
    "postgresql+psycopg": "mnemos.storage.postgres:PostgresStore",
}

__all__ = ["SUPPORTED_SCHEMES", "Store", "migrate", "open_store", "scheme_of"]


def scheme_of(url: str) -> str:
    scheme = url.partition("://")[0]
    if scheme not in SUPPORTED_SCHEMES:
        known = ", ".join(sorted(SUPPORTED_SCHEMES))
        raise ValueError(f"unsupported database URL scheme {scheme!r} (known: {known})")
    return scheme


def open_store(settings: Settings) -> Store:
    """The store for `settings.database_url` (the SQLite default when unset)."""
    url = settings.resolved_database_url()
    if scheme_of(url) == "sqlite":
        from mnemos.storage.sqlite import SqliteStore

        return SqliteStore(
            url,
            pool_size=settings.db_pool_size,
            synchronous=settings.sqlite_synchronous,
            search_budget_ms=settings.search_budget_ms,
        )
    from mnemos.storage.postgres import PostgresStore

    return PostgresStore(
        url, pool_size=settings.db_pool_size, search_budget_ms=settings.search_budget_ms
    )


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(resources.files("mnemos") / "migrations"))
    config.set_main_option("sqlalchemy.url", _alembic_url(url).replace("%", "%%"))
    return config


def _alembic_url(url: str) -> str:
    if scheme_of(url).startswith("postgres"):
        from mnemos.storage.postgres import driver_url

        return driver_url(url)
    return url


def migrate(settings: Settings, revision: str = "head") -> None:
    """Create or upgrade the database schema with Alembic."""
    url = settings.resolved_database_url()
    if scheme_of(url) == "sqlite":
        from pathlib import Path

        from sqlalchemy.engine import make_url

        path = make_url(url).database
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(url), revision)
