"""The two pagination families of every list: keyset cursors and (deprecated) offset pages.

A cursor is `base64url(json {"t": inserted_at, "i": id}) + "." + base64url(hmac)`: opaque to
callers and tamper-evident, signed with a secret every server process shares (it lives in the
database, so any process can continue a cursor another process issued). A list ranked by
relevance (`MNEMOS_CONTENT_QUERY_MODE=hybrid`) is one page and issues none: a keyset cursor
given to it continues the newest-first list it came from (`MemoryService.page`). A search's
cursor (`RecallPosition`) names the search it continues, its kept answer and an offset in it;
a memory's history cursor, the memory and a place in its history; no kind is accepted where
another is expected.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mnemos.domain.ids import iso
from mnemos.errors import InvalidPagination

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 50
MAX_PAGE = 1_000_000
SUNSET = "Thu, 01 Oct 2026 00:00:00 GMT"


@dataclass(frozen=True)
class Position:
    """A place in the newest-first order: strictly after this row."""

    inserted_at: datetime
    id: uuid.UUID


@dataclass(frozen=True)
class RecallPosition:
    """A place in one search's answer (`domain/recall.py`): the search named by `search` (a
    digest of its words, mode and audience), answered by `mode` (`keyword` when hybrid fell
    back), whose ordered answer the first page kept as `kept` (`SearchPages`); the next page
    starts at index `offset` of it."""

    search: str
    mode: str
    kept: str
    offset: int


@dataclass(frozen=True)
class CursorPage:
    limit: int
    after: Position | None


@dataclass(frozen=True)
class OffsetPage:
    page: int
    page_size: int

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.page_size


PageRequest = CursorPage | OffsetPage


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class CursorCodec:
    """Encodes and checks cursors with a shared secret."""

    def __init__(self, secret: bytes):
        self._secret = secret

    def _sign(self, payload: str) -> str:
        digest = hmac.new(self._secret, payload.encode(), hashlib.sha256).digest()
        return _b64(digest[:18])

    def encode(self, position: Position) -> str:
        return self._seal({"t": iso(position.inserted_at), "i": str(position.id)})

    def encode_recall(self, position: RecallPosition) -> str:
        p = position
        return self._seal({"k": p.search, "m": p.mode, "p": p.kept, "o": p.offset})

    def decode(self, cursor: str) -> Position:
        """The position a cursor names, or `invalid_pagination` for anything forged or broken."""
        data = self._open(cursor)
        try:
            moment = datetime.fromisoformat(data["t"].replace("Z", "+00:00"))
            return Position(moment, uuid.UUID(data["i"]))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise _malformed() from None

    def encode_history(self, memory_id: uuid.UUID, after: int) -> str:
        return self._seal({"h": str(memory_id), "a": after})

    def decode_history(self, cursor: str, memory_id: uuid.UUID) -> int:
        """The place in a memory's history its cursor continues after (`Store.history_page`):
        `invalid_pagination` for anything forged or broken, or for another memory's cursor."""
        data = self._open(cursor)
        try:
            after = data["a"]
            if not isinstance(after, int) or after < 0:
                raise TypeError("not a place")
            of = uuid.UUID(data["h"])
        except (ValueError, KeyError, TypeError, AttributeError):
            raise _malformed() from None
        if of != memory_id:
            raise InvalidPagination(
                "cursor is invalid", details={"cursor": "belongs to another memory's history"}
            )
        return after

    def decode_recall(self, cursor: str, search: str) -> RecallPosition:
        """The position a search's cursor names: `invalid_pagination` for anything forged or
        broken, or for a cursor of another search (other words, mode, filters or audience)."""
        data = self._open(cursor)
        try:
            position = RecallPosition(
                search=str(data["k"]), mode=str(data["m"]), kept=str(data["p"]), offset=data["o"]
            )
            if not isinstance(position.offset, int) or position.offset < 0:
                raise TypeError("not an offset")
        except (ValueError, KeyError, TypeError, AttributeError):
            raise _malformed() from None
        if not hmac.compare_digest(position.search, search):
            raise InvalidPagination(
                "cursor is invalid", details={"cursor": "belongs to another search"}
            )
        return position

    def _seal(self, data: dict[str, Any]) -> str:
        payload = _b64(json.dumps(data, separators=(",", ":")).encode())
        return f"{payload}.{self._sign(payload)}"

    def _open(self, cursor: str) -> Any:
        payload, _, signature = cursor.partition(".")
        if not payload or not hmac.compare_digest(signature.encode(), self._sign(payload).encode()):
            raise InvalidPagination("cursor is invalid", details={"cursor": "invalid or tampered"})
        try:
            return json.loads(_unb64(payload))
        except ValueError:
            raise _malformed() from None


def _malformed() -> InvalidPagination:
    return InvalidPagination("cursor is invalid", details={"cursor": "malformed"})


def _bounded_int(name: str, raw: str | None, default: int, high: int) -> int:
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidPagination(
            f"{name} must be an integer", details={name: "not an integer"}
        ) from None
    if not 1 <= value <= high:
        raise InvalidPagination(
            f"{name} must be between 1 and {high}", details={name: f"must be 1..{high}"}
        )
    return value


def parse_page(
    codec: CursorCodec,
    *,
    cursor: str | None,
    limit: str | None,
    page: str | None,
    page_size: str | None,
) -> PageRequest:
    """Turn the four pagination parameters into one page request, refusing mixed families."""
    keyset = cursor is not None or limit is not None
    offset = page is not None or page_size is not None
    if keyset and offset:
        raise InvalidPagination(
            "Use cursor + limit or page + page_size, not both",
            details={"pagination": "mixed cursor and offset families"},
        )
    if offset:
        return OffsetPage(
            page=_bounded_int("page", page, 1, MAX_PAGE),
            page_size=_bounded_int("page_size", page_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE),
        )
    after = codec.decode(cursor) if cursor is not None else None
    return CursorPage(limit=_bounded_int("limit", limit, DEFAULT_LIMIT, MAX_LIMIT), after=after)


def cursor_meta(page: CursorPage, next_cursor: str | None) -> dict[str, Any]:
    return {"has_more": next_cursor is not None, "limit": page.limit, "next_cursor": next_cursor}


def offset_meta(page: OffsetPage, total: int) -> dict[str, Any]:
    pages = (total + page.page_size - 1) // page.page_size
    return {
        "page": page.page,
        "page_size": page.page_size,
        "total_count": total,
        "total_pages": pages,
    }
