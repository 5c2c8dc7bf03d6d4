"""One middleware sees every answer: it writes the access line and, when on, the metrics.

It sits just inside `RequestContextMiddleware`, so it knows the request id and sees answers from
every other layer (the in-flight cap, the body limit, access checks, routes). After the app has
answered, `scope["route"]` names the route that served it (FastAPI sets it when it matches):
its template is the only part of the path that is logged or labelled. A request no route
matched is `unmatched`.

Most refusals are 4xx or 5xx answers whose body names the error code. Tuya's API refuses with
HTTP 200 and `success: false` in its envelope: its routes name the refusal with
`answered_error` (`tuya_<code>`), so those are counted and logged as errors too, and Tuya's
`1110` (frequency over limit) as a rate-limit refusal.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mnemos.api.access import BUSY_STATE, CALLER_STATE
from mnemos.logs import ACCESS_LOGGER

UNMATCHED = "unmatched"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""Methods labelled as they are; any other a client makes up is `OTHER` (bounded labels)."""
access_log = logging.getLogger(ACCESS_LOGGER)
ERROR_STATE = "answered_error"
RATE_LIMITED = frozenset({"tuya_1110"})
"""Codes of refusals for going over a rate limit that are not HTTP 429."""


WRITE_STATE = "memory_write"


def answered_error(scope_state: Any, code: str) -> None:
    """Name the error of an answer that refuses with a 2xx status (`request.state`)."""
    setattr(scope_state, ERROR_STATE, code)


def answered_write(scope_state: Any, family: str, action: str) -> None:
    """Name the memory write of an answer its route and method do not tell (an MCP call)."""
    setattr(scope_state, WRITE_STATE, (family, action))


def route_template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED


def error_code(body: bytes) -> str | None:
    """The `code` of an error body (`{"error": {"code": ...}}`), if it is one."""
    try:
        found = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    error = found.get("error") if isinstance(found, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else None


class ObserveMiddleware:
    def __init__(self, app: ASGIApp, metrics: bool):
        self.app = app
        self.metrics = None
        if metrics:
            from mnemos.api.metrics import metrics as process_metrics

            self.metrics = process_metrics()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        first_body: bytes | None = None

        async def observed(message: Message) -> None:
            nonlocal status, first_body
            if message["type"] == "http.response.start":
                status = message["status"]
            elif first_body is None and message["type"] == "http.response.body":
                first_body = message.get("body", b"")
            await send(message)

        try:
            await self.app(scope, receive, observed)
        finally:
            seconds = time.perf_counter() - started
            route = route_template(scope)
            if status >= 400:
                code = error_code(first_body or b"")
            else:
                code = scope.get("state", {}).get(ERROR_STATE)
            if self.metrics is not None:
                method = scope["method"] if scope["method"] in METHODS else "OTHER"
                self._count(route, method, status, seconds, code, scope.get("state", {}))
            if access_log.isEnabledFor(logging.INFO):
                self._log(scope, route, status, seconds, code)

    def _count(
        self,
        route: str,
        method: str,
        status: int,
        seconds: float,
        code: str | None,
        state: dict[str, Any],
    ) -> None:
        from mnemos.api.metrics import memory_write

        found = self.metrics
        assert found is not None
        labels = (route, method, str(status))
        found.requests.labels(*labels).inc()
        found.latency.labels(*labels).observe(seconds)
        if code is not None:
            found.errors.labels(code).inc()
            if status == 429 or code in RATE_LIMITED:
                found.rate_limited.labels(route).inc()
        if state.get(BUSY_STATE):  # its tenant's share (`api.access.take_share`), any API's shape
            found.tenant_busy.labels(route).inc()
        write = state.get(WRITE_STATE) or memory_write(route, method, status)
        if write is not None:
            found.memory_writes.labels(*write).inc()

    def _log(self, scope: Scope, route: str, status: int, seconds: float, code: str | None) -> None:
        state: dict[str, Any] = scope.get("state", {})
        caller: str = state.get(CALLER_STATE, "")
        kind, _, caller_id = caller.partition(":")
        request_id = state.get("request_id", "")
        fields = {
            "request_id": request_id,
            "method": scope["method"],
            "route": route,
            "status": status,
            "duration_ms": round(seconds * 1000, 3),
            "caller_kind": kind or "anonymous",
            "caller_id": caller_id or None,
        }
        if code is not None:
            fields["error_code"] = code
        message = f"{scope['method']} {route} {status} {fields['duration_ms']}ms id={request_id}"
        access_log.info(message, extra=fields)
