"""The people's web page at `/ui/`: see, correct and erase what agents remember about you.

Server-rendered (Jinja2 templates, plain HTML forms, one small script for the copy button);
every asset is served from `/ui/static/` (docs/ui.md, docs/decisions.md "The web page").
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from mnemos.api.ui import account, memories
from mnemos.api.ui.web import HOME, STATIC_DIR


def install_ui(app: FastAPI) -> None:
    """Serve the web page and its assets from this app."""
    app.include_router(account.router)
    app.include_router(memories.router)
    # The pages that count the requests carrying a session cookie (`access.counted_by_page`).
    app.state.page_routes = [*account.router.routes, *memories.router.routes]
    app.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="ui-static")

    @app.get("/ui", include_in_schema=False)
    def ui_root() -> RedirectResponse:
        return RedirectResponse(HOME, status_code=308)
