"""The people's web page at `/ui/`: see, correct and erase what agents remember about you.

Server-rendered (Jinja2 templates, plain HTML forms, one small script for the copy button);
every asset is served from `/ui/static/` (docs/ui.md, docs/decisions.md "The web page").
"""

from __future__ import annotations

import inspect

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from mnemos.api.routing import NamedMount
from mnemos.api.ui import account, memories
from mnemos.api.ui.web import HOME, STATIC_DIR, is_page, refusal_page
from mnemos.errors import MnemosError


def install_ui(app: FastAPI) -> None:
    """Serve the web page and its assets from this app."""
    app.include_router(account.router)
    app.include_router(memories.router)
    # The pages that count the requests carrying a session cookie (`access.counted_by_page`).
    app.state.page_routes = [*account.router.routes, *memories.router.routes]
    static = StaticFiles(directory=STATIC_DIR)
    app.router.routes.append(NamedMount("/ui/static", static, "ui-static", ("GET", "HEAD")))
    _answer_pages_errors_as_pages(app)

    @app.get("/ui", include_in_schema=False)
    def ui_root() -> RedirectResponse:
        return RedirectResponse(HOME, status_code=308)


def _answer_pages_errors_as_pages(app: FastAPI) -> None:
    """A path under `/ui` that no page serves (404), or a method none serves there (405), is
    answered as a page with the page's security headers, not the API's JSON: the API's handler
    still decides the status, code, message and `Allow`; this only renders its answer."""
    api_answer = app.exception_handlers[StarletteHTTPException]

    async def answer(request: Request, exc: Exception) -> Response:
        given = api_answer(request, exc)
        found: Response = await given if inspect.isawaitable(given) else given
        if not is_page(request.url.path):
            return found
        error = orjson.loads(bytes(found.body))["error"]
        refusal = MnemosError(error["message"])
        refusal.status, refusal.code = found.status_code, error["code"]
        page = refusal_page(refusal)
        if "allow" in found.headers:
            page.headers["Allow"] = found.headers["allow"]
        return page

    app.add_exception_handler(StarletteHTTPException, answer)
