"""Fixtures: one suite, run against every backend.

SQLite always runs (a fresh file per test, copied from a migrated template). PostgreSQL runs
when `MNEMOS_TEST_POSTGRES_URL` names a database (CI creates a fresh one per run): it is
migrated once and emptied between tests.

`MNEMOS_TEST_REPLICA=1` runs the PostgreSQL side on a throwaway primary with a streaming read
replica instead (`tests/pgcluster.py`), every store reading from the replica where it may.
`MNEMOS_TEST_REPLICA=paused` pauses the replica's replay as each test starts: whatever a test
reads from it is then stale, so the suite passes only if every read that must see a write
(read-your-writes, `mnemos.storage.replicas`) goes to the primary.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
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
from tests import tenant_filter
from tests.pgcluster import (
    Cluster,
    postgres_bin,
    replica_pair,
    replica_scans,
    wait_for_replay,
)
from tests.world import World


def pytest_configure(config: pytest.Config) -> None:
    """Every engine of the run reports memory-side statements without a tenant filter."""
    del config
    tenant_filter.install()
    # Processes the tests start through `tests/watched.py` report here (inherited by them).
    log = Path(tempfile.mkdtemp(prefix="mnemos-tenants-")) / "found.jsonl"
    os.environ.setdefault(tenant_filter.LOG_ENV, str(log))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when Mnemos ran a memory-side statement without its tenant
    (`tests/tenant_filter.py`), printing each with the line that ran it."""
    del exitstatus
    tenant_filter.absorb(os.environ[tenant_filter.LOG_ENV])
    found = tenant_filter.report()
    if not found:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = ["", f"{len(found)} memory-side statements without a tenant filter:", *found]
    for line in lines:
        if reporter is not None:
            reporter.write_line(line, red=True)
        else:
            sys.stderr.write(line + "\n")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


POSTGRES_URL = os.environ.get("MNEMOS_TEST_POSTGRES_URL", "")
REPLICA_MODE = os.environ.get("MNEMOS_TEST_REPLICA", "")
BACKENDS = ["sqlite"] + (["postgresql"] if POSTGRES_URL or REPLICA_MODE else [])


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "template.db"
    migrate(Settings(database_url=f"sqlite:///{path}"))
    return path


@pytest.fixture(scope="session")
def postgres_ready(request: pytest.FixtureRequest) -> str:
    if REPLICA_MODE:
        pair: Replicated = request.getfixturevalue("replicated")
        return pair.urls()[0]
    migrate(Settings(database_url=POSTGRES_URL))
    return POSTGRES_URL


@dataclass
class Replicated:
    """A migrated database on a throwaway primary, and a streaming replica of it."""

    primary: Cluster
    replica: Cluster
    database: str = "mnemos"

    def urls(self) -> tuple[str, str]:
        return self.primary.url(self.database), self.replica.url(self.database)


@pytest.fixture(scope="session")
def replicated() -> Iterator[Replicated]:
    if postgres_bin() is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup) not installed")
    with replica_pair() as (primary, replica):
        pair = Replicated(primary, replica)
        primary.sql(f"CREATE DATABASE {pair.database}")
        migrate(Settings(database_url=pair.urls()[0]))
        before = replica_scans(replica)
        yield pair
        if REPLICA_MODE == "paused":
            return
        # Every store is closed by now: their replica sessions report their reads as they end.
        deadline = time.monotonic() + 30
        while replica_scans(replica) <= before:
            assert time.monotonic() < deadline, "no read was served by the replica"
            time.sleep(0.2)


def _empty_postgres(url: str) -> None:
    engine = sa.create_engine(driver_url(url))
    names = ", ".join(table.name for table in metadata.sorted_tables)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"TRUNCATE {names} RESTART IDENTITY CASCADE")
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
def settings(request: pytest.FixtureRequest, database_url: str) -> Settings:
    given = Settings(
        database_url=database_url,
        sqlite_synchronous="NORMAL",
        rate_limit_per_minute=0,
        embedder="none",
    )
    if REPLICA_MODE and not database_url.startswith("sqlite"):
        replica_url = request.getfixturevalue("replicated").urls()[1]
        # Paused, the replica must stay in rotation however far behind it falls.
        lag = 3600.0 if REPLICA_MODE == "paused" else given.replica_max_lag_seconds
        given = given.model_copy(
            update={"database_replica_urls": replica_url, "replica_max_lag_seconds": lag}
        )
    return given


@pytest.fixture
def store(request: pytest.FixtureRequest, settings: Settings) -> Iterator[Store]:
    if not settings.replica_urls():
        opened = open_store(settings)
        yield opened
        opened.close()
        return
    pair: Replicated = request.getfixturevalue("replicated")
    if REPLICA_MODE == "paused":
        pair.replica.sql("SELECT pg_wal_replay_resume()")
    wait_for_replay(pair.primary, pair.replica)
    opened = open_store(settings)
    wait_for_rotation(opened)
    if REPLICA_MODE == "paused":  # the replica keeps the state this test starts from
        pair.replica.sql("SELECT pg_wal_replay_pause()")
    yield opened
    opened.close()


def wait_for_rotation(store: Store, timeout: float = 60) -> None:
    """Wait until every replica is in rotation (a condition, not a timing check)."""
    deadline = time.monotonic() + timeout
    while not all(state.in_rotation for state in store.replica_status()):
        assert time.monotonic() < deadline, store.replica_status()
        time.sleep(0.02)


@pytest.fixture
def client(settings: Settings, store: Store) -> Iterator[TestClient]:
    with TestClient(create_app(settings, store)) as test_client:
        yield test_client


@pytest.fixture
def world(store: Store) -> World:
    return World(store)
