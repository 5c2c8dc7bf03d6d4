"""Prometheus metrics (`MNEMOS_METRICS=on`): what they are, and `GET /metrics`.

Labels name only route templates, methods, statuses, error codes and API families: never a
tenant, a key, a path's values or content. Under `mnemos serve --workers N` every process writes
its samples to files in `PROMETHEUS_MULTIPROC_DIR` (a directory the supervisor makes for one
run and removes after, `mnemos.serving.shared_metrics`), and `/metrics` adds them up, whichever
process answers. `prometheus_client` is imported only when metrics are on: it picks its
multi-process mode from the environment at import.
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass
from functools import cache
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from mnemos.config import Settings
from mnemos.errors import Unauthorized

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

FAMILIES = (
    ("/api/v1/agent/", "band_agent"),
    ("/api/v1/me/", "band_human"),
    ("/v1.0/", "tuya"),
    ("/api/agents/", "superagent"),
)
"""API family of a route, by the start of its template (memory writes are counted per family)."""


@dataclass(frozen=True)
class Metrics:
    requests: Any
    latency: Any
    errors: Any
    rate_limited: Any
    tenant_busy: Any
    pool_in_use: Any
    memory_writes: Any


@cache
def metrics() -> Metrics:
    """The process's metrics, created once (the registry refuses a name twice)."""
    from prometheus_client import Counter, Gauge, Histogram

    labels = ("route", "method", "status")
    found = Metrics(
        requests=Counter("mnemos_http_requests", "HTTP requests answered", labels),
        latency=Histogram(
            "mnemos_http_request_duration_seconds",
            "Time from a request's head to its answer",
            labels,
            buckets=LATENCY_BUCKETS,
        ),
        errors=Counter("mnemos_errors", "Error answers by error code", ("code",)),
        rate_limited=Counter("mnemos_rate_limit_refusals", "Requests refused with 429", ("route",)),
        tenant_busy=Counter(
            "mnemos_tenant_share_refusals",
            "Requests refused because their tenant had its share of requests in flight",
            ("route",),
        ),
        pool_in_use=Gauge(
            "mnemos_db_connections_in_use",
            "Database connections checked out of the pools",
            multiprocess_mode="livesum",
        ),
        memory_writes=Counter(
            "mnemos_memory_writes",
            "Successful requests that stored, changed or deleted memories, by API family",
            ("family", "action"),
        ),
    )
    _watch_pools(found.pool_in_use)
    return found


def _watch_pools(gauge: Any) -> None:
    import sqlalchemy as sa

    def out(*_: Any) -> None:
        gauge.inc()

    def back(*_: Any) -> None:
        gauge.dec()

    sa.event.listen(sa.pool.Pool, "checkout", out)
    sa.event.listen(sa.pool.Pool, "checkin", back)


def memory_write(route: str, method: str, status: int) -> tuple[str, str] | None:
    """(family, action) when a successful request to a memory route wrote something."""
    if status >= 300 or method in ("GET", "HEAD") or "memor" not in route:
        return None
    family = next((name for prefix, name in FAMILIES if route.startswith(prefix)), None)
    if family is None:
        return None
    if method == "DELETE":
        return family, "deleted"
    if method == "POST" and (status == 201 or family == "tuya"):
        return family, "stored"
    return family, "changed"


def render() -> bytes:
    from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess

    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return bytes(generate_latest(registry))
    return bytes(generate_latest(REGISTRY))


def install_metrics_route(app: FastAPI, settings: Settings) -> None:
    """`GET /metrics` (left out of the OpenAPI document: it is for Prometheus, not clients)."""
    token = settings.metrics_token.encode()
    metrics()

    @app.get("/metrics", include_in_schema=False)
    def prometheus(request: Request) -> Response:
        if token:
            given = request.headers.get("authorization", "").encode()
            if not hmac.compare_digest(given, b"Bearer " + token):
                raise Unauthorized("A valid bearer token is required for /metrics")
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(render(), media_type=CONTENT_TYPE_LATEST)
