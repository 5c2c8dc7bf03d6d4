"""Building JSON responses: fast paths that skip response-model validation, and page shapes."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse as StarletteJSONResponse

from mnemos.api.schemas import ErrorEnvelope, memory_json
from mnemos.domain.memories import MemoryPage
from mnemos.domain.pagination import SUNSET


class JSONResponse(StarletteJSONResponse):
    """Every JSON answer: encoded by orjson (UTF-8, compact), several times faster than `json`."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error statuses a route can answer."""
    return {status: {"model": ErrorEnvelope} for status in statuses}


def data(payload: Any, status: int = 200) -> JSONResponse:
    return JSONResponse({"data": payload}, status_code=status)


def memory_page(page: MemoryPage, rows: list[dict[str, Any]] | None = None) -> JSONResponse:
    """A list answer: `data`, and the same pagination object as `meta` and `metadata`."""
    body = {
        "data": rows if rows is not None else [memory_json(m) for m in page.items],
        "meta": page.meta,
        "metadata": page.meta,
    }
    response = JSONResponse(body)
    if page.deprecated:
        response.headers["Deprecation"] = "true"
        response.headers["Sunset"] = SUNSET
    return response
