"""Building JSON responses: fast paths that skip response-model validation, and page shapes."""

from __future__ import annotations

import json
import logging
import math
import re
from typing import Any

import orjson
from starlette.responses import JSONResponse as StarletteJSONResponse

from mnemos.api.schemas import ErrorEnvelope, memory_json
from mnemos.domain.memories import MemoryPage
from mnemos.domain.pagination import SUNSET
from mnemos.domain.recall import Recalled

log = logging.getLogger("mnemos")


class JSONResponse(StarletteJSONResponse):
    """Every JSON answer: encoded by orjson (UTF-8, compact), several times faster than `json`.

    A value orjson cannot encode (only rows stored before the rules of `domain/values.py`, or
    planted in the database, hold one) does not fail the answer: see `encodable`.
    """

    def render(self, content: Any) -> bytes:
        try:
            return orjson.dumps(content)
        except orjson.JSONEncodeError:
            return orjson.dumps(encodable(content))


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


def search_answer(found: Recalled, rows: list[dict[str, Any]] | None = None) -> JSONResponse:
    """A search answer: `data` best first, each memory with its `score`, and `meta`."""
    if rows is None:
        rows = [memory_json(ranked.memory) for ranked in found.items]
    scored = [{**row, "score": r.score} for row, r in zip(rows, found.items, strict=True)]
    return JSONResponse({"data": scored, "meta": found.meta})


# orjson's limits: integers from -2^63 to 2^64-1, 255 levels of nesting (this leaves room for
# the envelope around a memory's metadata).
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
_MAX_DEPTH = 128
_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(value: Any, path: str = "$", owner: Any = None, depth: int = 0) -> Any:
    """`value` with what orjson cannot encode replaced, each replacement logged with the id of
    the object that holds it (a memory's id, for metadata): a lone surrogate becomes U+FFFD, an
    integer out of range its decimal string, nesting past 128 levels the string
    "[nested too deeply]", a non-finite number null, anything else its `str`.
    """
    if isinstance(value, str):
        if _SURROGATE.search(value) is None:
            return value
        return _replaced(_SURROGATE.sub("\ufffd", value), "a lone surrogate", path, owner)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if _INT_MIN <= value <= _INT_MAX:
            return value
        return _replaced(str(value), "an integer out of range", path, owner)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict | list) and depth >= _MAX_DEPTH:
        return _replaced("[nested too deeply]", "nesting too deep", path, owner)
    if isinstance(value, list):
        return [encodable(v, f"{path}[{i}]", owner, depth + 1) for i, v in enumerate(value)]
    if isinstance(value, dict):
        owner = value.get("id", owner)
        return {
            encodable(str(k), path, owner, depth): encodable(v, f"{path}.{k}", owner, depth + 1)
            for k, v in value.items()
        }
    return _replaced(str(value), type(value).__name__, path, owner)


def _replaced(replacement: Any, what: str, path: str, owner: Any) -> Any:
    log.warning("id %s: %s at %s answered as a replacement", _shown(owner), what, _shown(path))
    return replacement


def _shown(value: Any) -> str:
    return str(value).encode("utf-8", "backslashreplace").decode()


def error_body(code: str, message: str, request_id: str, details: Any = None) -> bytes:
    """The one JSON shape every error has."""
    error: dict[str, Any] = {"code": code, "message": message, "request_id": request_id}
    if details is not None:
        error["details"] = details
    return json.dumps({"error": error}).encode()
