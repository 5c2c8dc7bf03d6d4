"""ASGI middleware: a request id on every response, a cap on requests at once and on body size."""

from __future__ import annotations

import enum
import hashlib
import json
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mnemos.ratelimit import RateLimiter

REQUEST_ID_HEADER = b"x-request-id"


def error_body(code: str, message: str, request_id: str, details: Any = None) -> bytes:
    """The one JSON shape every error has."""
    error: dict[str, Any] = {"code": code, "message": message, "request_id": request_id}
    if details is not None:
        error["details"] = details
    return json.dumps({"error": error}).encode()


async def send_error(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    """Answer with an `error_body` and nothing more."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def request_id_of(scope: Scope) -> str:
    return str(scope.get("state", {}).get("request_id", ""))


class RequestContextMiddleware:
    """Gives each request an id, echoed as `X-Request-Id` on whatever answers it."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    h for h in message.get("headers", []) if h[0].lower() != REQUEST_ID_HEADER
                ]
                headers.append((REQUEST_ID_HEADER, request_id.encode()))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_id)


class InFlightLimitMiddleware:
    """503 `overloaded` once this process is already handling `max_in_flight` requests.

    A request counts from its head to its response, so a stalled body counts until the server's
    body timeout closes its connection; idle connections never count.
    """

    def __init__(self, app: ASGIApp, max_in_flight: int):
        self.app = app
        self.max_in_flight = max_in_flight
        self.in_flight = 0  # one event loop per process: no lock needed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_in_flight:
            message = "The server is handling too many requests; retry shortly"
            body = error_body("overloaded", message, request_id_of(scope))
            await send_error(send, 503, body, [(b"retry-after", b"1")])
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


class BodyLimitMiddleware:
    """Reads the whole body up front, refusing one over `max_body_bytes` (413).

    A handler thus never sees a partial body, and an oversized one is refused before any work is
    done, whether or not it declared its length. A client that leaves mid-body gets no answer and
    its request is not handled.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int):
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = await self._read_body(scope, receive)
        if body is _Unread.GONE:
            return
        if body is _Unread.TOO_LARGE:
            message = f"Request body exceeds {self.max_body_bytes} bytes"
            payload = error_body("payload_too_large", message, request_id_of(scope))
            await send_error(send, 413, payload, [(b"connection", b"close")])
            return
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | _Unread:
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    if int(value) > self.max_body_bytes:
                        return _Unread.TOO_LARGE
                except ValueError:
                    return _Unread.TOO_LARGE
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return _Unread.GONE
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return _Unread.TOO_LARGE
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


class _Unread(enum.Enum):
    TOO_LARGE = "too_large"
    GONE = "gone"


IDENTITY_HEADERS = (b"x-api-key", b"api_key", b"authorization", b"client_id")


def caller_identity(scope: Scope) -> str:
    """Who to count a request against: its credential (hashed), else its address."""
    headers = dict(scope.get("headers", []))
    for name in IDENTITY_HEADERS:
        value = headers.get(name)
        if value:
            return name.decode() + ":" + hashlib.sha256(value).hexdigest()[:32]
    client = scope.get("client") or ("unknown", 0)
    return f"ip:{client[0]}"


class RateLimitMiddleware:
    """429 `rate_limited` with `Retry-After` once a caller passes its per-minute limit."""

    def __init__(
        self, app: ASGIApp, limiter: RateLimiter | None, exempt: tuple[str, ...] = ("/healthz",)
    ):
        self.app = app
        self.limiter = limiter
        self.exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.limiter is None or scope["type"] != "http" or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        verdict = await self.limiter.check(caller_identity(scope))
        limit_headers = [
            (b"x-ratelimit-limit", str(verdict.limit).encode()),
            (b"x-ratelimit-remaining", str(verdict.remaining).encode()),
        ]
        if not verdict.allowed:
            request_id = scope.get("state", {}).get("request_id", "")
            body = error_body("rate_limited", "Too many requests; retry later", request_id)
            await send(
                {
                    "type": "http.response.start",
                    "status": 429,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"retry-after", str(verdict.retry_after).encode()),
                        *limit_headers,
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return

        async def send_with_limits(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *limit_headers]
            await send(message)

        await self.app(scope, receive, send_with_limits)
