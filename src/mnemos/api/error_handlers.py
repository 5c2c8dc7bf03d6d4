"""One handler renders every error as `{"error": {"code", "message", "request_id", "details"?}}`."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Route

from mnemos.api.access import count_unanswered_address
from mnemos.api.responses import error_body
from mnemos.api.routing import NamedMount
from mnemos.errors import MethodNotAllowed, MnemosError, PayloadTooLarge, RateLimited

log = logging.getLogger("mnemos")

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: MethodNotAllowed.code,
    406: "not_acceptable",
    413: PayloadTooLarge.code,
    415: "unsupported_media_type",
    422: "validation_failed",
}


def request_id(request: Request) -> str:
    return str(getattr(request.state, "request_id", "") or "")


def error_response(
    request: Request,
    status: int,
    code: str,
    message: str,
    details: Any = None,
    headers: dict[str, str] | None = None,
) -> Response:
    rid = request_id(request)
    return Response(
        error_body(code, message, rid, details),
        status_code=status,
        media_type="application/json",
        headers={**(headers or {}), "X-Request-Id": rid},
    )


def _field_name(loc: tuple[Any, ...]) -> str:
    # The first part says where the field is (FastAPI's location), the rest names it: a field
    # may itself be called `query` (the search's text) or `body`.
    parts = [str(part) for part in loc]
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:]
    return ".".join(parts) or "body"


def refusal_headers(exc: MnemosError) -> dict[str, str]:
    """The headers a refusal carries in any shape (JSON or a page): when to retry a 429."""
    return {"Retry-After": str(exc.retry_after)} if isinstance(exc, RateLimited) else {}


async def _mnemos_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, MnemosError)
    headers = refusal_headers(exc)
    return error_response(request, exc.status, exc.code, exc.message, exc.details, headers)


PAGINATION_FIELDS = frozenset({"cursor", "limit", "page", "page_size"})


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    details: dict[str, str] = {}
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            details["body"] = "invalid JSON"
            continue
        details.setdefault(_field_name(tuple(err.get("loc", ()))), str(err.get("msg", "invalid")))
    if details and set(details) <= PAGINATION_FIELDS:
        return error_response(request, 422, "invalid_pagination", "Invalid pagination", details)
    return error_response(request, 422, "validation_failed", "Validation failed", details)


def allowed_methods(request: Request) -> str:
    """The methods served at the route template this path falls under: the first route, in the
    order they are tried, whose path matches (the included routers' routes, which `app.routes`
    hides, are `app.state.served_routes`), with every other route of the same template
    (Starlette's own `Allow` names only the first route's methods). Templates that also match
    the path (`/memories/{memory_id}` for `/memories/export`) are not the path's and add none."""
    routes = [*getattr(request.app.state, "served_routes", []), *request.app.routes]
    # As the app's router saw the request: a mount it entered (the page's assets) moved its
    # `root_path` on, and kept the app's in `app_root_path`.
    scope = {
        **request.scope,
        "root_path": request.scope.get("app_root_path", request.scope.get("root_path", "")),
    }
    matching = [
        route
        for route in routes
        if isinstance(route, Route | NamedMount) and route.matches(scope)[0] is not Match.NONE
    ]
    if not matching:
        return ""
    template = matching[0].path
    methods = {m for route in matching if route.path == template for m in route.methods or ()}
    return ", ".join(sorted(methods))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code in (404, 405):  # the router's: no route, so no authentication counted it
        try:
            await count_unanswered_address(request)
        except RateLimited as refused:
            return await _mnemos_error(request, refused)
    code = _HTTP_CODES.get(exc.status_code, "error")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = allowed_methods(request)
    return error_response(request, exc.status_code, code, str(exc.detail), headers=headers)


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error", exc_info=exc)
    return error_response(request, 500, "internal_error", "Internal server error")


def answer_routing_errors_as(
    app: FastAPI, family: Callable[[str], bool], render: Callable[[Request, Response], Response]
) -> None:
    """Render the router's errors (404, 405, and the 429 of their count) on paths of an API
    family in its own shape: the handler installed so far still decides the status, code,
    message and `Allow`; `render` turns that answer (the error shape) into the family's."""
    earlier = app.exception_handlers[StarletteHTTPException]

    async def answer(request: Request, exc: Exception) -> Response:
        given = earlier(request, exc)
        found: Response = await given if inspect.isawaitable(given) else given
        return render(request, found) if family(request.url.path) else found

    app.add_exception_handler(StarletteHTTPException, answer)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(MnemosError, _mnemos_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
