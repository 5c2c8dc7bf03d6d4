import uuid
from datetime import UTC, datetime

import pytest

from mnemos.domain.pagination import (
    CursorCodec,
    CursorPage,
    OffsetPage,
    Position,
    offset_meta,
    parse_page,
)
from mnemos.errors import InvalidPagination

CODEC = CursorCodec(b"k" * 32)
POS = Position(datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC), uuid.uuid4())


def page(**given: str | None) -> object:
    args: dict[str, str | None] = {"cursor": None, "limit": None, "page": None, "page_size": None}
    args.update(given)
    return parse_page(CODEC, **args)  # type: ignore[arg-type]


def test_cursor_round_trips_to_the_microsecond() -> None:
    assert CODEC.decode(CODEC.encode(POS)) == POS


def test_a_cursor_from_another_secret_is_refused() -> None:
    foreign = CursorCodec(b"x" * 32).encode(POS)
    with pytest.raises(InvalidPagination):
        CODEC.decode(foreign)


@pytest.mark.parametrize(
    "cursor",
    ["", "abc", "abc.def", ".", "eyJ0IjoiMjAyNC0wMS0xNVQxMDozMDowMFoiLCJpIjoiNTUwZTg0MDAifQ"],
)
def test_forged_or_truncated_cursors_are_refused(cursor: str) -> None:
    with pytest.raises(InvalidPagination):
        CODEC.decode(cursor)


def test_tampered_payload_is_refused() -> None:
    good = CODEC.encode(POS)
    payload, sig = good.split(".")
    with pytest.raises(InvalidPagination):
        CODEC.decode(payload[:-2] + "AA." + sig)
    with pytest.raises(InvalidPagination):
        CODEC.decode(good[:-3])


def test_defaults_are_the_cursor_family() -> None:
    assert page() == CursorPage(limit=20, after=None)
    assert page(page="2") == OffsetPage(page=2, page_size=20)
    assert page(page_size="50") == OffsetPage(page=1, page_size=50)


@pytest.mark.parametrize(
    "given",
    [
        {"limit": "0"},
        {"limit": "101"},
        {"limit": "ten"},
        {"page": "0"},
        {"page_size": "51"},
        {"limit": "5", "page": "1"},
        {"cursor": "x", "page_size": "5"},
    ],
)
def test_out_of_range_or_mixed_is_invalid_pagination(given: dict[str, str]) -> None:
    with pytest.raises(InvalidPagination):
        page(**given)


def test_offset_meta_counts_pages() -> None:
    assert offset_meta(OffsetPage(2, 20), 41) == {
        "page": 2,
        "page_size": 20,
        "total_count": 41,
        "total_pages": 3,
    }
    assert offset_meta(OffsetPage(1, 20), 0)["total_pages"] == 0
