"""ASGI middleware: a request id on every response, caps on requests at once and on body size,
and access checks (repeated credential headers, limits for requests without a credential)."""

from __future__ import annotations

import enum
import re
import uuid

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mnemos.api.access import (
    ADDRESS_BUSY,
    RATE_LIMIT_STATE,
    address_identity,
    counted_by_page,
    give_back_share,
    take_share,
    upload_identity,
)
from mnemos.api.responses import error_body
from mnemos.api.tuya import TOO_FREQUENT, TUYA_PATHS, envelope
from mnemos.api.ui.web import is_page, refusal_page
from mnemos.domain.history import REQUEST_ID, REQUEST_ID_LENGTH
from mnemos.errors import PayloadTooLarge, RateLimited, TenantBusy
from mnemos.indexer import InFlight
from mnemos.ratelimit import RateLimiter, TenantShares, Verdict

REQUEST_ID_HEADER = b"x-request-id"
# An incoming X-Request-ID is kept when it looks like an id (a proxy's or a client's), so one id
# follows a request through every log; anything else is replaced by a fresh one.
WELL_FORMED_REQUEST_ID = re.compile(rb"[A-Za-z0-9][A-Za-z0-9._:-]{0,%d}" % (REQUEST_ID_LENGTH - 1))


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


def incoming_request_id(scope: Scope) -> str | None:
    """The request's own `X-Request-ID`, if it sent exactly one well-formed one."""
    found = [value for name, value in scope.get("headers", []) if name.lower() == REQUEST_ID_HEADER]
    if len(found) == 1 and WELL_FORMED_REQUEST_ID.fullmatch(found[0]):
        return str(found[0].decode("ascii"))
    return None


class RequestContextMiddleware:
    """Gives each request an id (its own `X-Request-ID` when well-formed), echoed as
    `X-Request-Id` on whatever answers it and written in error bodies and access lines."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = incoming_request_id(scope) or uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        token = REQUEST_ID.set(request_id)  # for the history of the changes this request makes

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    h for h in message.get("headers", []) if h[0].lower() != REQUEST_ID_HEADER
                ]
                headers.append((REQUEST_ID_HEADER, request_id.encode()))
                message["headers"] = headers
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            REQUEST_ID.reset(token)


class InFlightLimitMiddleware:
    """503 `overloaded` once this process is already handling `max_in_flight` requests.

    A request counts from its head to its response, so a stalled body counts until the server's
    body timeout closes its connection; idle connections never count. The count is `requests`,
    which the process's embedding worker also reads (it gives way to requests: `InFlight`).
    """

    def __init__(self, app: ASGIApp, max_in_flight: int, requests: InFlight | None = None):
        self.app = app
        self.max_in_flight = max_in_flight
        self.requests = requests or InFlight()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.requests.count >= self.max_in_flight:
            message = "The server is handling too many requests; retry shortly"
            body = error_body("overloaded", message, request_id_of(scope))
            await send_error(send, 503, body, [(b"retry-after", b"1")])
            return
        self.requests.begin()
        try:
            await self.app(scope, receive, send)
        finally:
            self.requests.end()


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
            payload = error_body(PayloadTooLarge.code, message, request_id_of(scope))
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


# Every header authentication reads, in any API family. Sent twice, one reader could take the
# first and another the last: such a request is refused before anything reads it.
CREDENTIAL_HEADERS = frozenset(
    {
        b"authorization",
        b"x-api-key",
        b"api_key",
        b"client_id",
        b"access_token",
        b"sign",
        b"t",
        b"nonce",
        b"signature-headers",
    }
)
CREDENTIAL_PATHS = ("/api/", TUYA_PATHS, "/mcp")  # where authentication reads the headers


def credential_headers(scope: Scope) -> tuple[set[bytes], bytes | None]:
    """The credential headers a request carries, and the first one it repeats (if any)."""
    seen: set[bytes] = set()
    for raw, _ in scope.get("headers", []):
        name = raw.lower()
        if name in CREDENTIAL_HEADERS:
            if name in seen:
                return seen, name
            seen.add(name)
    return seen, None


class AccessMiddleware:
    """Refuses repeated credential headers (400 `duplicate_header`), counts requests that carry
    no credential (or carry one where nothing reads it) against their client address (429
    `rate_limited` with `Retry-After`; 429 `tenant_busy` past the address's share of requests at
    once), and adds the `X-RateLimit-*` headers of whichever count the request met. Requests
    with credentials hold a slot of their address's uploads until their body is in, then are
    counted by authentication itself (`mnemos.api.access`), against the identity it found, and
    take their tenant's slot there. Whichever slot a request holds is given back here, when the
    request ends: its response sent (a streamed body included), failed, or its client gone.
    """

    def __init__(
        self,
        app: ASGIApp,
        limiter: RateLimiter | None,
        shares: TenantShares | None = None,
        exempt: tuple[str, ...] = ("/healthz",),
    ):
        self.app = app
        self.limiter = limiter
        self.shares = shares
        self.exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        present, repeated = credential_headers(scope)
        if repeated is not None:
            await self._duplicate(scope, receive, send, repeated.decode("latin-1"))
            return
        state = scope.setdefault("state", {})
        # A credential header counts only where authentication reads it; elsewhere (FastAPI's
        # documents, the page's assets, `/metrics`) the request is counted as one without.
        credentialed = bool(present) and scope["path"].startswith(CREDENTIAL_PATHS)
        exempt = scope["path"] in self.exempt
        anonymous = not credentialed and not exempt and not counted_by_page(scope)
        if anonymous and self.limiter is not None:
            verdict = await self.limiter.check(address_identity(scope))
            state[RATE_LIMIT_STATE] = verdict
            if not verdict.allowed:
                await self._too_many(scope, receive, send, verdict)
                return
        # A request without a credential holds its address's slot for its whole life. Any
        # other holds a slot of its address's uploads until its body's last part is in (its
        # caller is not known before authentication, which comes after the body), then its
        # tenant's: so slow bodies count against their address whatever credential they carry
        # (docs/decisions.md, "A request's body").
        if anonymous:
            taken = take_share(scope, self.shares, address_identity(scope))
        else:
            taken = take_share(scope, self.shares, upload_identity(scope))
            receive = self._body_then_free(scope, receive)
        if not taken:
            await self._busy(scope, receive, send)
            return

        async def send_with_limits(message: Message) -> None:
            verdict = state.get(RATE_LIMIT_STATE)
            if message["type"] == "http.response.start" and verdict is not None:
                message["headers"] = [*message.get("headers", []), *_limit_headers(verdict)]
            await send(message)

        try:
            await self.app(scope, receive, send_with_limits)
        finally:
            give_back_share(scope, self.shares)

    def _body_then_free(self, scope: Scope, receive: Receive) -> Receive:
        """`receive`, giving back the address's slot once the body's last part has arrived, so
        that authentication can take the caller's tenant's slot."""
        reading = True

        async def receive_body() -> Message:
            nonlocal reading
            message = await receive()
            if reading and not (message["type"] == "http.request" and message.get("more_body")):
                reading = False
                give_back_share(scope, self.shares)
            return message

        return receive_body

    async def _duplicate(self, scope: Scope, receive: Receive, send: Send, name: str) -> None:
        message = f"The {name} header may appear only once"
        if scope["path"].startswith(TUYA_PATHS):
            response: Response = envelope(Request(scope), code=1109, msg=message)
        else:
            request_id = scope.get("state", {}).get("request_id", "")
            body = error_body("duplicate_header", message, request_id, {name: "repeated"})
            response = Response(body, status_code=400, media_type="application/json")
        await response(scope, receive, send)

    async def _too_many(self, scope: Scope, receive: Receive, send: Send, verdict: Verdict) -> None:
        refused = RateLimited(verdict.retry_after)
        await self._refuse(scope, receive, send, refused, _limit_headers(verdict))

    async def _busy(self, scope: Scope, receive: Receive, send: Send) -> None:
        verdict = scope.get("state", {}).get(RATE_LIMIT_STATE)
        limits = _limit_headers(verdict) if verdict is not None else []
        await self._refuse(scope, receive, send, TenantBusy(ADDRESS_BUSY), limits)

    async def _refuse(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        refusal: RateLimited,
        limits: list[tuple[bytes, bytes]],
    ) -> None:
        """A refusal for the address, in the shape of the path's family: Tuya's envelope
        (1110), the page's error page, or the error shape."""
        if scope["path"].startswith(TUYA_PATHS):
            tuya = envelope(Request(scope), code=TOO_FREQUENT, msg=refusal.message)
            await tuya(scope, receive, send)
            return
        if is_page(scope["path"]):
            page = refusal_page(refusal)
            page.headers["Retry-After"] = str(refusal.retry_after)
            await page(scope, receive, send)
            return
        body = error_body(refusal.code, refusal.message, request_id_of(scope))
        headers = [(b"retry-after", str(refusal.retry_after).encode()), *limits]
        await send_error(send, refusal.status, body, headers)


def _limit_headers(verdict: Verdict) -> list[tuple[bytes, bytes]]:
    return [
        (b"x-ratelimit-limit", str(verdict.limit).encode()),
        (b"x-ratelimit-remaining", str(verdict.remaining).encode()),
    ]
