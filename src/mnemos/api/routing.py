"""The route class of every router: request bodies whose JSON Python cannot read are invalid JSON.

Starlette parses a body with `json.loads`, which raises more than `JSONDecodeError`: a body
nested deeper than the interpreter's recursion limit raises `RecursionError`, an integer of more
than 4,300 digits or bytes that are not UTF-8 a plain `ValueError`. FastAPI answers those with a
400 "error parsing the body"; here they are what they are, invalid JSON, so every family answers
them as it answers any invalid JSON (Band: 422 `validation_failed` naming `body`; Tuya: 1109).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute, Match, Mount, Route
from starlette.types import ASGIApp, Scope


def parse_json(body: bytes) -> Any:
    """`json.loads`, raising `JSONDecodeError` for every body it cannot read."""
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:100]
        raise json.JSONDecodeError(f"unreadable JSON: {reason}", "", 0) from None


class JsonBodyRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body())
        return self._json


class MnemosRoute(APIRoute):
    """Hands the endpoint a `JsonBodyRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        original = super().get_route_handler()

        async def handler(request: Request) -> Response:
            return await original(JsonBodyRequest(request.scope, request.receive))

        return handler


class _NamesItself:
    """A route that names itself in the request's scope as FastAPI's routes do: the access log
    and the metrics label a request by `scope["route"]`'s template (`api/observe.py`), else as
    `unmatched`."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)  # type: ignore[misc]
        if match is not Match.NONE:
            child["route"] = self
        return match, child


class NamedRoute(_NamesItself, Route):
    """A plain Starlette route (an ASGI app of its own, such as `/mcp`), named in the scope."""


class NamedMount(_NamesItself, Mount):
    """A mount (the page's static files), named in the scope by its path, that says which
    methods it serves (a 405's `Allow`)."""

    def __init__(self, path: str, app: ASGIApp, name: str, methods: Iterable[str]):
        super().__init__(path, app=app, name=name)
        self.methods = set(methods)


def named(routes: list[BaseRoute]) -> None:
    """Make the plain Starlette routes FastAPI adds of its own (`/openapi.json`, `/docs`,
    `/redoc`) `NamedRoute`s, in place, so that their requests are labelled by their path rather
    than counted with scanners' 404s as `unmatched`."""
    for i, route in enumerate(routes):
        if type(route) is Route:
            routes[i] = NamedRoute(
                route.path,
                route.endpoint,
                methods=list(route.methods or ()),
                name=route.name,
                include_in_schema=route.include_in_schema,
            )
