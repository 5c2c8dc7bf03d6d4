"""The value rules of `mnemos.domain.values`, at their boundaries."""

from __future__ import annotations

from typing import Any

import pytest

from mnemos.domain.values import (
    MAX_METADATA_DEPTH,
    check_metadata,
    check_text,
    text_problem,
)
from mnemos.errors import ValidationFailed


def nested(levels: int) -> dict[str, Any]:
    """A metadata object `levels` containers deep (the object itself is level 1)."""
    value: Any = []
    for _ in range(levels - 2):
        value = [value]
    return {"x": value}


def test_text_keeps_control_characters_but_not_nul_or_lone_surrogates() -> None:
    assert text_problem("tab\tnew\nline\r esc\x1b bell\x07 emoji \U0001f600") is None
    assert "NUL" in (text_problem("a\x00") or "")
    assert "U+D800" in (text_problem("a\ud800") or "")
    assert "U+DFFF" in (text_problem("\udfff") or "")
    with pytest.raises(ValidationFailed) as refused:
        check_text("x\x00", "title")
    assert refused.value.details is not None and "title" in refused.value.details


@pytest.mark.parametrize(
    "metadata",
    [
        nested(MAX_METADATA_DEPTH),
        {"max": 2**63 - 1, "min": -(2**63), "b": True, "none": None, "f": -1.5e308},
        {},
    ],
)
def test_metadata_at_the_limits(metadata: dict[str, Any]) -> None:
    assert check_metadata(metadata) is metadata


@pytest.mark.parametrize(
    ("metadata", "path"),
    [
        (nested(MAX_METADATA_DEPTH + 1), "metadata.x" + "[0]" * (MAX_METADATA_DEPTH - 1)),
        ({"a": 2**63}, "metadata.a"),
        ({"a": [-(2**63) - 1]}, "metadata.a[0]"),
        ({"a": float("nan")}, "metadata.a"),
        ({"a": {1: "non-string key"}}, "metadata.a"),
        ({"a": (1, 2)}, "metadata.a"),
        ({"k\ud800": 1}, "metadata.k\\ud800"),
        ({"k" * 100: "\x00"}, "metadata." + "k" * 64 + "..."),
        (["not", "an", "object"], "metadata"),
    ],
)
def test_metadata_refusals_name_the_path(metadata: Any, path: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        check_metadata(metadata)
    assert refused.value.details is not None and path in refused.value.details
