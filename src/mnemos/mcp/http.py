"""`/mcp`: the MCP streamable HTTP endpoint, on the same app (and every `--workers` process)
as the REST APIs.

Order of a request: the app's middleware first (request id, in-flight cap, body limit, repeated
credential headers, limits for requests without a credential), then authentication here, as on
every REST route (`api.deps.any_caller`: an agent's key, or a person's key or token; failures
and requests counted per identity), so a missing or bad credential is a 401 before the SDK reads
the body. Only then does the SDK's session manager handle the JSON-RPC message.

The manager is stateless and answers in JSON (no server-held session, no SSE stream): any
worker can serve any request of a client's conversation, and a request costs no more than the
message it carries. It is started with the app (its task group lives in the app's lifespan,
`running`), one per app and process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from mnemos.api.deps import Services, any_caller
from mnemos.api.middleware import request_id_of, send_error
from mnemos.api.responses import error_body
from mnemos.api.routing import NamedRoute
from mnemos.errors import McpNotInstalled, MnemosError, RateLimited, Unauthorized
from mnemos.mcp import sdk_installed

if TYPE_CHECKING:
    from mcp.server import ServerRequestContext
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from mnemos.mcp.tools import Caller

PATH = "/mcp"
CALLER_STATE = "mcp_caller"  # where authentication leaves the caller, in the request's state


async def caller_of_request(ctx: ServerRequestContext[Any, Any]) -> Caller:
    """The caller `McpEndpoint` authenticated for the HTTP request that carried this message."""
    request = ctx.request
    caller: Caller | None = (
        request.scope.get("state", {}).get(CALLER_STATE) if isinstance(request, Request) else None
    )
    if caller is None:  # cannot happen behind McpEndpoint: refuse rather than guess
        raise Unauthorized()
    return caller


async def _refuse(scope: Scope, send: Send, exc: MnemosError) -> None:
    headers: list[tuple[bytes, bytes]] = []
    if isinstance(exc, Unauthorized):
        headers.append((b"www-authenticate", b'Bearer realm="mnemos"'))
    if isinstance(exc, RateLimited):
        headers.append((b"retry-after", str(exc.retry_after).encode()))
    body = error_body(exc.code, exc.message, request_id_of(scope), exc.details)
    await send_error(send, exc.status, body, headers)


class McpEndpoint:
    """The ASGI app at `/mcp`: authenticates, then hands the request to the SDK."""

    def __init__(self, max_body_bytes: int):
        self.max_body_bytes = max_body_bytes
        self.services: Services | None = None
        self.manager: StreamableHTTPSessionManager | None = None

    def route(self) -> NamedRoute:
        # No GET: it opens an event stream for messages a stateless server never sends, and the
        # stream would hold one of the process's in-flight slots for as long as a client keeps
        # it (a few idle streams, and every caller's requests are refused with 503). The
        # protocol lets a server without that stream answer 405; the SDK's client opens it only
        # in a session, which a stateless server never starts. No DELETE either: it ends a
        # session, and there is none (the SDK would refuse it after authentication, in its own
        # shape, without `Allow`: review20).
        return NamedRoute(PATH, endpoint=self, methods=["POST"])

    @asynccontextmanager
    async def running(self, services: Services) -> AsyncIterator[None]:
        """Serve MCP while the app runs (enter it in the app's lifespan)."""
        self.services = services
        if not sdk_installed():
            yield
            return
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        from mnemos.mcp.server import build_server

        manager = StreamableHTTPSessionManager(
            app=build_server(services, caller_of_request),
            stateless=True,
            json_response=True,
            max_request_body_size=self.max_body_bytes,
        )
        async with manager.run():
            self.manager = manager
            try:
                yield
            finally:
                self.manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.services is None:
            raise RuntimeError("McpEndpoint.running() was not entered (the app's lifespan)")
        if self.manager is None:
            await _refuse(scope, send, McpNotInstalled())
            return
        try:
            caller = await any_caller(Request(scope, receive), self.services)
        except MnemosError as exc:
            await _refuse(scope, send, exc)
            return
        scope.setdefault("state", {})[CALLER_STATE] = caller
        await self.manager.handle_request(scope, receive, send)
