"""The page's calls for a person's rights over what is about them: count, export, erase.

Kept in this one module so they can follow the privacy API's domain service: the page must
export and erase exactly what `GET /api/v1/me/memories/export` and
`POST /api/v1/me/memories/erase` do.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from mnemos.api.deps import Services
from mnemos.api.schemas import memory_json
from mnemos.domain.human import HumanListParams
from mnemos.domain.models import UserContext
from mnemos.domain.pagination import CursorPage, Position
from mnemos.domain.queries import ALL_STATUSES, Filters

ABOUT_ME = HumanListParams(scope="about_me")
EVERY_STATUS = Filters(statuses=ALL_STATUSES)
BATCH = 100


def count_about(svc: Services, ctx: UserContext) -> int:
    """How many memories are about the person, every status."""
    return svc.human.count_about(ctx)


def export_about(svc: Services, ctx: UserContext) -> Iterator[dict[str, Any]]:
    """Every memory about the person, every status, with its display fields, newest first."""
    after = None
    while True:
        result, shown = svc.human.page_with_display(
            ctx, ABOUT_ME, EVERY_STATUS, CursorPage(limit=BATCH, after=after)
        )
        for memory in result.items:
            yield {**memory_json(memory), **shown[memory.id]}
        if not result.meta.get("has_more"):
            return
        last = result.items[-1]
        after = Position(last.inserted_at, last.id)


def erase_about(svc: Services, ctx: UserContext) -> int:
    """Delete every memory about the person, every status; how many were deleted."""
    erased = 0
    while True:
        result = svc.human.list_page(
            ctx, ABOUT_ME, EVERY_STATUS, CursorPage(limit=BATCH, after=None)
        )
        for memory in result.items:
            svc.human.delete(ctx, str(memory.id))
            erased += 1
        if not result.meta.get("has_more"):
            return erased
