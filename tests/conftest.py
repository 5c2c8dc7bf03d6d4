"""Fixtures: one suite, run against every backend.

SQLite always runs (a fresh file per test, copied from a migrated template). PostgreSQL runs
when `MNEMOS_TEST_POSTGRES_URL` names a database (CI creates a fresh one per run): it is
migrated once and emptied between tests.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

# Imported up front: on CPython 3.11.7 the hypothesis plugin's late import at the end of a
# run that used band-sdk fails with "AST constructor recursion depth mismatch".
import hypothesis  # noqa: F401
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.storage import migrate, open_store
from mnemos.storage.base import Store
from mnemos.storage.postgres import driver_url
from mnemos.storage.schema import metadata
from tests.world import World

POSTGRES_URL = os.environ.get("MNEMOS_TEST_POSTGRES_URL", "")
BACKENDS = ["sqlite"] + (["postgresql"] if POSTGRES_URL else [])


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "template.db"
    migrate(Settings(database_url=f"sqlite:///{path}"))
    return path


@pytest.fixture(scope="session")
def postgres_ready() -> str:
    migrate(Settings(database_url=POSTGRES_URL))
    return POSTGRES_URL


def _empty_postgres(url: str) -> None:
    engine = sa.create_engine(driver_url(url))
    names = ", ".join(table.name for table in metadata.sorted_tables)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"TRUNCATE {names} CASCADE")
    engine.dispose()


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        target = tmp_path / "mnemos.db"
        shutil.copy(template, target)
        return f"sqlite:///{target}"
    url: str = request.getfixturevalue("postgres_ready")
    _empty_postgres(url)
    return url


@pytest.fixture
def settings(database_url: str) -> Settings:
    # No embedder unless a test asks for one (tests/test_recall.py): the local model and its
    # background worker would only slow the other tests down.
    return Settings(
        database_url=database_url,
        sqlite_synchronous="NORMAL",
        rate_limit_per_minute=0,
        embedder="none",
    )


@pytest.fixture
def store(settings: Settings) -> Iterator[Store]:
    opened = open_store(settings)
    yield opened
    opened.close()


@pytest.fixture
def client(settings: Settings, store: Store) -> Iterator[TestClient]:
    with TestClient(create_app(settings, store)) as test_client:
        yield test_client


@pytest.fixture
def world(store: Store) -> World:
    return World(store)
