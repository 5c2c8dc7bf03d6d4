"""ASGI middleware: a request id on every response, and a hard cap on body size."""

from __future__ import annotations

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


class RequestContextMiddleware:
    """Gives each request an id (echoed as `X-Request-Id`) and refuses oversized bodies (413).

    The body is read up front, up to the limit, so a handler never sees a partial body and an
    oversized one is refused before any work is done, whether or not it declared its length.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int):
        self.app = app
        self.max_body_bytes = max_body_bytes

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

        body = await self._read_body(scope, receive)
        if body is None:
            await self._too_large(request_id, send_with_id)
            return
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send_with_id)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | None:
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    if int(value) > self.max_body_bytes:
                        return None
                except ValueError:
                    return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    async def _too_large(self, request_id: str, send: Send) -> None:
        body = error_body(
            "payload_too_large",
            f"Request body exceeds {self.max_body_bytes} bytes",
            request_id,
        )
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


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
