"""The people's web page at `/ui/`: see, correct and erase what agents remember about you.

Server-rendered (Jinja2 templates, plain HTML forms, one small script for the copy button);
every asset is served from `/ui/static/` (docs/ui.md, docs/decisions.md "The web page").
"""

from __future__ import annotations

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import Scope

from mnemos.api.error_handlers import answer_routing_errors_as
from mnemos.api.routing import NamedMount
from mnemos.api.ui import account, memories
from mnemos.api.ui.web import ASSET_HEADERS, HOME, STATIC_DIR, is_page, refusal_page
from mnemos.errors import MnemosError


def install_ui(app: FastAPI) -> None:
    """Serve the web page and its assets from this app."""
    app.include_router(account.router)
    app.include_router(memories.router)
    # The pages that count the requests carrying a session cookie (`access.counted_by_page`).
    app.state.page_routes = [*account.router.routes, *memories.router.routes]
    static = Assets(directory=STATIC_DIR)
    app.router.routes.append(NamedMount("/ui/static", static, "ui-static", ("GET", "HEAD")))
    _answer_pages_errors_as_pages(app)

    @app.get("/ui", include_in_schema=False)
    def ui_root() -> RedirectResponse:
        return RedirectResponse(HOME, status_code=308)


class Assets(StaticFiles):
    """The page's assets, with the page's security headers (`nosniff` above all)."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(ASSET_HEADERS)
        return response


def _answer_pages_errors_as_pages(app: FastAPI) -> None:
    """A path under `/ui` that no page serves (404), or a method none serves there (405), is
    answered as a page with the page's security headers, not the API's JSON."""
    answer_routing_errors_as(app, is_page, _as_page)


def _as_page(_request: Request, found: Response) -> Response:
    error = orjson.loads(bytes(found.body))["error"]
    refusal = MnemosError(error["message"])
    refusal.status, refusal.code = found.status_code, error["code"]
    page = refusal_page(refusal)
    for name in ("allow", "retry-after"):
        if name in found.headers:
            page.headers[name.title()] = found.headers[name]
    return page
