"""A real `mnemos serve --workers 2` with metrics and JSON logs: `/metrics` parsed with
prometheus_client's own parser counts exactly the requests sent (whichever process answered
them), every log line is JSON, and no key, token or content is in any of it."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import BACKENDS
from tests.live.conftest import _database_for, start_server, stop_server
from tests.world import memory_body

AGENT = "/api/v1/agent/memories"
HUMAN = "/api/v1/me/memories"
TOKEN = "metrics-token-" + uuid.uuid4().hex
pytestmark = pytest.mark.live


@pytest.fixture(params=BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    databases = _database_for(request.param, tmp_path)
    yield next(databases)
    databases.close()


def test_metrics_and_logs_of_two_workers(database: str, tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    settings = {
        "MNEMOS_METRICS": "on",
        "MNEMOS_METRICS_TOKEN": TOKEN,
        "MNEMOS_LOG_FORMAT": "json",
        "TMPDIR": str(scratch),  # where the run's metrics directory goes
    }
    server = start_server(
        database, tmp_path, "--workers", "2", "--log-level", "info", settings=settings
    )
    sent: Counter[tuple[str, str, str]] = Counter()
    secrets: list[str] = [TOKEN]
    try:
        org = server.admin("create-org", "--name", "Observed")["id"]
        user = server.admin("create-user", "--name", "U", "--email", "u@o.test", "--org", org)
        agent = server.admin("create-agent", "--owner", user["id"], "--name", "A")
        secrets += [user["api_key"], agent["api_key"]]
        bot, person = {"X-API-Key": agent["api_key"]}, {"X-API-Key": user["api_key"]}

        def call(method: str, path: str, route: str, **kwargs: object) -> httpx.Response:
            # A new connection each time, so the kernel spreads them over both workers.
            response = httpx.request(method, server.base_url + path, timeout=30, **kwargs)  # type: ignore[arg-type]
            sent[(route, method, str(response.status_code))] += 1
            return response

        contents = [f"private-content-{uuid.uuid4().hex}" for _ in range(5)]
        secrets += contents
        for content in contents:
            assert (
                call("POST", AGENT, AGENT, json=memory_body(content), headers=bot).status_code
                == 201
            )
        for _ in range(7):
            query = {"content_query": contents[0][:20]}
            assert call("GET", AGENT, AGENT, params=query, headers=bot).status_code == 200
        missing = f"{AGENT}/{uuid.uuid4()}"
        for _ in range(3):
            assert call("GET", missing, AGENT + "/{id}", headers=bot).status_code == 404
        for _ in range(4):
            assert call("GET", AGENT, AGENT).status_code == 401
        traced = call("GET", HUMAN, HUMAN, headers={**person, "X-Request-ID": "trace-0001"})
        assert traced.headers["x-request-id"] == "trace-0001"
        refused = call("GET", AGENT, AGENT, headers={"X-Request-ID": "bad id!"})
        assert refused.json()["error"]["request_id"] == refused.headers["x-request-id"]
        assert refused.headers["x-request-id"] != "bad id!"

        assert httpx.get(server.base_url + "/metrics").status_code == 401
        wrong = httpx.get(server.base_url + "/metrics", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        scraped = httpx.get(
            server.base_url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert scraped.status_code == 200
    finally:
        stop_server(server)

    families = {family.name: family for family in text_string_to_metric_families(scraped.text)}
    counted = {
        (s.labels["route"], s.labels["method"], s.labels["status"]): s.value
        for s in families["mnemos_http_requests"].samples
        if s.name == "mnemos_http_requests_total"
        and s.labels["route"] not in ("/healthz", "/metrics")
    }
    assert counted == {key: float(n) for key, n in sent.items()}
    latency = {
        (s.labels["route"], s.labels["method"], s.labels["status"]): s.value
        for s in families["mnemos_http_request_duration_seconds"].samples
        if s.name.endswith("_count") and s.labels["route"] not in ("/healthz", "/metrics")
    }
    assert latency == counted
    errors = {
        s.labels["code"]: s.value
        for s in families["mnemos_errors"].samples
        if s.name.endswith("_total")
    }
    assert errors["not_found"] == 3 and errors["unauthorized"] == 5 + 2  # and /metrics twice
    writes = {
        (s.labels["family"], s.labels["action"]): s.value
        for s in families["mnemos_memory_writes"].samples
        if s.name.endswith("_total")
    }
    assert writes == {("band_agent", "stored"): 5.0}
    assert "mnemos_db_connections_in_use" in families
    tenants = [org, user["id"], agent["id"], *secrets]
    assert not [t for t in tenants if t in scraped.text]

    log = server.log.read_text()
    lines = [line for line in log.splitlines() if not line.startswith("mnemos: serving on")]
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    access = [r for r in records if r["logger"] == "mnemos.access"]
    logged = Counter(
        (r["route"], r["method"], str(r["status"]))
        for r in access
        if r["route"] not in ("/healthz", "/metrics")
    )
    assert logged == sent
    by_id = {r["request_id"]: r for r in access}
    assert by_id["trace-0001"]["caller_kind"] == "user"
    assert by_id["trace-0001"]["caller_id"] == user["id"]
    assert {r["caller_kind"] for r in access if r["route"] == AGENT and r["status"] == 201} == {
        "agent"
    }
    assert all({"time", "request_id", "route", "status", "duration_ms"} <= set(r) for r in access)
    assert not [secret for secret in secrets if secret in log]
    assert not list(scratch.glob("mnemos-metrics-*"))  # the run's metrics directory is gone
