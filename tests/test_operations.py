"""`mnemos doctor`, request ids, and `/metrics` switched off and guarded (over ASGI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.storage.base import Store
from mnemos.storage.postgres import driver_url
from tests.world import World, memory_body


def doctor(url: str, **env: str) -> tuple[int, dict[str, dict[str, str]]]:
    done = subprocess.run(
        [sys.executable, "-m", "mnemos", "doctor", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "MNEMOS_DATABASE_URL": url, **env},
        timeout=120,
    )
    found = json.loads(done.stdout)
    assert found["ok"] == (done.returncode == 0)
    return done.returncode, {f["check"]: f for f in found["findings"]}


def test_doctor_finds_a_healthy_database_healthy(
    client: TestClient, world: World, database_url: str
) -> None:
    agent = world.agent(world.user("Ann", "acme"))
    client.post("/api/v1/agent/memories", json=memory_body(), headers=agent.headers)
    code, findings = doctor(database_url)
    assert code == 0, findings
    assert [f["level"] for f in findings.values()] == ["ok"] * 6
    assert "1 memories" in findings["search_index"]["detail"]
    assert findings["migrations"]["detail"].startswith("at head")


def test_doctor_reports_each_problem(database_url: str) -> None:
    code, findings = doctor("sqlite:////nonexistent-dir/x/mnemos.db")
    assert code == 1 and findings["database"]["level"] == "problem"
    code, findings = doctor(database_url, MNEMOS_SQLITE_SYNCHRONOUS="SOMETIMES")
    assert code == 1 and findings["configuration"]["level"] == "problem"
    if database_url.startswith("sqlite"):  # settings `serve` refuses, as `serve` does
        replica = "postgresql://x@127.0.0.1/replica"
        code, findings = doctor(database_url, MNEMOS_DATABASE_REPLICA_URLS=replica)
        assert code == 1 and "REPLICA" in findings["configuration"]["detail"], findings

    engine = sa.create_engine(driver_url(database_url))
    with engine.begin() as conn:
        head = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0001'")
    code, findings = doctor(database_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE alembic_version SET version_num = '{head}'")
    assert code == 1 and "run `mnemos migrate`" in findings["migrations"]["detail"]
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":  # an index that lost an entry
            conn.exec_driver_sql(
                "INSERT INTO memories (id, content, search_text, system, type, segment, scope, "
                "metadata, status, inserted_at, updated_at, tenant_id) VALUES "
                f"('{uuid.uuid4().hex}', 'x', 'x', 'long_term', 'semantic', 'user', 'agent', "
                f"'{{}}', 'active', '2026-12-01 00:00:00', '2026-12-01 00:00:00', "
                f"'{uuid.uuid4().hex}')"
            )
            conn.exec_driver_sql("DELETE FROM memories_fts_docsize")
        else:  # the suite's PostgreSQL database is shared: put the index back after
            conn.exec_driver_sql("DROP INDEX ix_memories_search")
    try:
        code, findings = doctor(database_url)
        assert code == 1 and findings["search_index"]["level"] == "problem", findings
    finally:
        if engine.dialect.name == "postgresql":
            with engine.begin() as conn:
                conn.exec_driver_sql(
                    "CREATE INDEX IF NOT EXISTS ix_memories_search ON memories USING gin (search)"
                )
        engine.dispose()


def test_a_well_formed_request_id_is_kept_and_others_replaced(client: TestClient) -> None:
    kept = client.get("/api/v1/agent/memories", headers={"X-Request-ID": "lb-7f3a.12:9"})
    assert kept.headers["x-request-id"] == "lb-7f3a.12:9"
    assert kept.json()["error"]["request_id"] == "lb-7f3a.12:9"
    for bad in ("has space", "x" * 200, "-leading", "a/b"):
        response = client.get("/api/v1/agent/memories", headers={"X-Request-ID": bad})
        rid = response.headers["x-request-id"]
        assert rid != bad and len(rid) == 32 and response.json()["error"]["request_id"] == rid


def test_metrics_are_off_by_default(client: TestClient) -> None:
    assert client.get("/metrics").status_code == 404


@pytest.mark.parametrize("token", ["", "s3cret-token"])
def test_metrics_on_one_process(settings: Settings, store: Store, token: str) -> None:
    on = settings.model_copy(update={"metrics": True, "metrics_token": token})
    with TestClient(create_app(on, store)) as client:
        client.get("/healthz")
        client.request("BREW", f"/no/such/{uuid.uuid4()}")  # made-up method and path
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if token:
            refused = client.get("/metrics")
            assert refused.status_code == 401
            assert refused.json()["error"]["code"] == "unauthorized"
        scraped = client.get("/metrics", headers=headers)
        assert scraped.status_code == 200
        assert 'mnemos_http_requests_total{method="GET",route="/healthz",status="200"}' in (
            scraped.text
        )
        assert 'method="OTHER",route="unmatched"' in scraped.text  # labels stay bounded
        assert "BREW" not in scraped.text and "/no/such" not in scraped.text
        assert "/metrics" not in client.get("/openapi.json").text


def test_the_documents_and_the_pages_assets_are_labelled_by_their_path(
    settings: Settings, store: Store
) -> None:
    on = settings.model_copy(update={"metrics": True})
    with TestClient(create_app(on, store)) as client:
        for path in ("/openapi.json", "/docs", "/ui/static/ui.css"):
            assert client.get(path).status_code == 200, path
        scraped = client.get("/metrics").text
    for route in ("/openapi.json", "/docs", "/ui/static"):
        assert f'mnemos_http_requests_total{{method="GET",route="{route}",status="200"}}' in scraped


def counted(scraped: str, series: str) -> float:
    """The value of one series of a `/metrics` answer (0 when it is not there yet)."""
    for line in scraped.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_tuya_refusals_are_counted_as_errors(
    settings: Settings, store: Store, world: World
) -> None:
    """Tuya refuses with HTTP 200 and `success: false`: still an error in the metrics."""
    from tests.api.test_rate_limits import failures_limited

    org = world.org("metrics-tuya")
    client_id = f"m{uuid.uuid4().hex[:12]}"
    store.create_tuya_project(client_id, "s" * 32, uuid.UUID(org))
    on = failures_limited(settings, metrics=True)
    bad = {"client_id": client_id, "sign": "BAD", "t": "1"}
    route = 'route="/v1.0/token"'
    with TestClient(create_app(on, store)) as client:
        before = client.get("/metrics").text
        codes = [
            client.get("/v1.0/token", params={"grant_type": 1}, headers=bad).json()["code"]
            for _ in range(4)
        ]
        after = client.get("/metrics").text
    assert codes[-1] == 1110 and set(codes[:-1]) <= {1004, 1013}, codes
    refusals = {f"tuya_{code}": codes.count(code) for code in set(codes)}
    for code, times in refusals.items():
        series = f'mnemos_errors_total{{code="{code}"}}'
        assert counted(after, series) - counted(before, series) == times, (code, after)
    limited = f"mnemos_rate_limit_refusals_total{{{route}}}"
    assert counted(after, limited) - counted(before, limited) == 1


def test_backup_refuses_a_missing_file(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mnemos", "backup", "--out", str(tmp_path / "b.db")],
        capture_output=True,
        text=True,
        env={**os.environ, "MNEMOS_DATABASE_URL": f"sqlite:///{tmp_path / 'none.db'}"},
        timeout=120,
    )
    assert done.returncode == 1 and "No database file" in done.stderr
    assert not (tmp_path / "b.db").exists()


def test_log_format_and_level_come_from_settings(capsys: pytest.CaptureFixture[str]) -> None:
    import logging
    import logging.config

    from mnemos.logs import ACCESS_LOGGER, log_config

    names = ("mnemos", "mnemos.access", "uvicorn", "uvicorn.error", "uvicorn.access")
    saved = {
        n: (lg.level, list(lg.handlers), lg.propagate, lg.disabled)
        for n in names
        if (lg := logging.getLogger(n))
    }
    try:
        logging.config.dictConfig(log_config(Settings(log_format="json", log_level="warning")))
        access = logging.getLogger(ACCESS_LOGGER)
        assert not access.isEnabledFor(logging.INFO)  # no access lines at warning
        logging.getLogger("mnemos").warning("disk %s", "low", extra={"request_id": "r1"})
        line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
        assert line["message"] == "disk low" and line["level"] == "warning"
        assert line["request_id"] == "r1" and line["logger"] == "mnemos"
        logging.config.dictConfig(log_config(Settings(log_format="text"), "debug"))
        assert access.isEnabledFor(logging.DEBUG)
        access.info("GET / 200")
        assert "INFO mnemos.access: GET / 200" in capsys.readouterr().err
    finally:  # leave logging as the rest of the suite had it
        for name, (level, handlers, propagate, disabled) in saved.items():
            logger = logging.getLogger(name)
            logger.setLevel(level)
            logger.handlers[:] = handlers
            logger.propagate, logger.disabled = propagate, disabled
