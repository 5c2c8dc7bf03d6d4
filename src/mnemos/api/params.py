"""Query parameters every memory list shares, parsed into domain values."""

from __future__ import annotations

from mnemos.api.deps import Services
from mnemos.domain.models import MemoryType, Segment, System, parse_enum
from mnemos.domain.pagination import PageRequest, parse_page
from mnemos.domain.queries import Filters, status_filter
from mnemos.domain.search import parse_search


def _text(value: int | None) -> str | None:
    return None if value is None else str(value)


def page_request(
    svc: Services, cursor: str | None, limit: int | None, page: int | None, page_size: int | None
) -> PageRequest:
    return parse_page(
        svc.memories.codec,
        cursor=cursor,
        limit=_text(limit),
        page=_text(page),
        page_size=_text(page_size),
    )


def list_filters(
    svc: Services,
    system: str | None,
    type: str | None,
    segment: str | None,
    status: str | None,
    content_query: str | None,
) -> Filters:
    """Parse the narrowing filters every memory list shares."""
    return Filters(
        statuses=status_filter(status),
        system=parse_enum(System, system, "system") if system is not None else None,
        type=parse_enum(MemoryType, type, "type") if type is not None else None,
        segment=parse_enum(Segment, segment, "segment") if segment is not None else None,
        search=(
            parse_search(content_query, svc.settings.max_query_chars)
            if content_query is not None
            else None
        ),
    )
