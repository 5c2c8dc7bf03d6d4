"""What Mnemos accepts as a stored value: one rule for text, one for `metadata`.

**Text** (every string a person, agent or device gives us and Mnemos stores or looks up:
memory content and thought, Tuya values and names, names and descriptions of organizations,
people and agents, e-mail addresses, room titles, Tuya role ids): valid Unicode, so no lone
surrogate (U+D800-U+DFFF, which no UTF-8 encoder, database or JSON encoder accepts), and no
NUL (U+0000, which PostgreSQL text cannot hold). Other control characters (tab, newline, ANSI
escapes from a tool's output, ...) are kept as they are: both databases store them and JSON
escapes them.

**Metadata** (a memory's `metadata`): a JSON object whose keys are text, whose strings are
text, at most `MAX_METADATA_DEPTH` containers deep (the object itself is level 1), with
integers within signed 64 bits, finite numbers only (no NaN, Infinity or 1e400), and at most
`MAX_METADATA_BYTES` bytes once encoded as compact UTF-8 JSON. Whatever passes can be stored by
both backends and read and sent back by any API.

A refusal is `validation_failed` naming the field, and for metadata the path inside it
(`metadata.tags[3]`), before anything is stored.
"""

from __future__ import annotations

import math
import re
from typing import Any

import orjson

from mnemos.errors import invalid_field

MAX_METADATA_DEPTH = 32
MAX_METADATA_BYTES = 64 * 1024
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

METADATA_RULE = (
    f"A JSON object: at most {MAX_METADATA_DEPTH} levels deep and {MAX_METADATA_BYTES // 1024} KiB"
    " as compact UTF-8 JSON; integers within signed 64 bits; finite numbers only; keys and"
    " strings valid Unicode without NUL."
)

_NOT_TEXT = re.compile("[\x00\ud800-\udfff]")
_SHOWN_KEY_CHARS = 64


def text_problem(value: str) -> str | None:
    """Why `value` is not acceptable text, or None when it is."""
    bad = _NOT_TEXT.search(value)
    if bad is None:
        return None
    if bad.group() == "\x00":
        return f"must not contain NUL (U+0000), found at character {bad.start()}"
    where = f"U+{ord(bad.group()):04X} at character {bad.start()}"
    return f"must be valid Unicode, found a lone surrogate {where}"


def check_text(value: str, field: str) -> str:
    """`value` when it is acceptable text, else `validation_failed` naming `field`."""
    problem = text_problem(value)
    if problem is not None:
        raise invalid_field(field, problem)
    return value


def check_optional_text(value: str | None, field: str) -> str | None:
    return None if value is None else check_text(value, field)


def check_metadata(value: Any, field: str = "metadata") -> dict[str, Any]:
    """`value` when it is acceptable metadata, else `validation_failed` naming the path."""
    if not isinstance(value, dict):
        raise invalid_field(field, "must be a JSON object")
    _check_value(value, field, 1)
    size = len(orjson.dumps(value))
    if size > MAX_METADATA_BYTES:
        raise invalid_field(field, f"must be at most {MAX_METADATA_BYTES} bytes as JSON")
    return value


def _check_value(value: Any, path: str, depth: int) -> None:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        _check_text_at(value, path)
    elif isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise invalid_field(path, "integers must be within -2^63 .. 2^63-1")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise invalid_field(path, "numbers must be finite (no NaN, Infinity or overflow)")
    elif isinstance(value, dict | list):
        if depth > MAX_METADATA_DEPTH:
            raise invalid_field(path, f"must be nested at most {MAX_METADATA_DEPTH} levels deep")
        _check_container(value, path, depth)
    else:
        raise invalid_field(path, "must be a JSON value")


def _check_container(value: dict[Any, Any] | list[Any], path: str, depth: int) -> None:
    if isinstance(value, list):
        for index, item in enumerate(value):
            _check_value(item, f"{path}[{index}]", depth + 1)
        return
    for key, item in value.items():
        if not isinstance(key, str):
            raise invalid_field(path, "keys must be strings")
        child = f"{path}.{_shown(key)}"
        _check_text_at(key, child)
        _check_value(item, child, depth + 1)


def _check_text_at(value: str, path: str) -> None:
    problem = text_problem(value)
    if problem is not None:
        raise invalid_field(path, problem)


def _shown(key: str) -> str:
    """A key as it can appear in an error's path: bad characters escaped, long keys cut."""
    shown = _NOT_TEXT.sub(lambda bad: f"\\u{ord(bad.group()):04x}", key)
    return shown if len(shown) <= _SHOWN_KEY_CHARS else shown[:_SHOWN_KEY_CHARS] + "..."
