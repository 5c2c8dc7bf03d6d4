"""Query parameters every memory list shares, parsed into domain values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from anyio import CapacityLimiter, to_thread
from fastapi import Depends, Query, Request

from mnemos.api.deps import Services, services
from mnemos.domain.models import MemoryType, Segment, System, parse_enum
from mnemos.domain.pagination import PageRequest, parse_page
from mnemos.domain.probes import Probe
from mnemos.domain.queries import Filters, status_filter
from mnemos.domain.recall import MAX_LIMIT, SearchMode, check_floor
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


REMOTE_EMBED_THREADS = 32
"""Query embeddings by an embeddings endpoint waited for at once per process, each on a thread
that only waits on the network: a slow endpoint holds these, never the request threads (one or
two per process) nor the database connections (docs/decisions.md, "A search waits for an
embeddings endpoint before it holds anything")."""


def remote_embed_threads(request: Request) -> CapacityLimiter:
    state = request.app.state
    if getattr(state, "remote_embed_threads", None) is None:
        state.remote_embed_threads = CapacityLimiter(REMOTE_EMBED_THREADS)
    limiter: CapacityLimiter = state.remote_embed_threads
    return limiter


@dataclass(frozen=True)
class ListQuery:
    """Pagination and filters of a memory list, parsed."""

    page: PageRequest
    filters: Filters


async def list_query(
    cursor: str | None = Query(None, max_length=512, description="Opaque keyset cursor"),
    limit: int | None = Query(None, description="1-100, default 20"),
    page: int | None = Query(None, description="Deprecated offset page, from 1"),
    page_size: int | None = Query(None, description="Deprecated page size, 1-50"),
    system: str | None = Query(None, description="sensory, working or long_term"),
    type: str | None = Query(None, description="Memory type (valid for the system)"),
    segment: str | None = Query(None, description="user, agent, tool or guideline"),
    status: str | None = Query(None, description="active, superseded, archived or all"),
    content_query: str | None = Query(None, description="Full-text search"),
    svc: Services = Depends(services),
) -> ListQuery:
    """The query parameters every memory list shares (declare it after the caller's auth).

    Async because it only parses (a sync dependency would cost a thread-pool hop per request).
    A list ranked by an embeddings endpoint has its query embedded by its route (`ranked`)."""
    return ListQuery(
        page=page_request(svc, cursor, limit, page, page_size),
        filters=list_filters(svc, system, type, segment, status, content_query),
    )


@dataclass(frozen=True)
class SearchRequest:
    """A search's text, mode, size and list filters, parsed."""

    text: str
    mode: SearchMode
    limit: int
    filters: Filters
    cursor: str | None
    min_score: float | None = None

    @property
    def arguments(self) -> tuple[Filters, str, SearchMode, int, str | None]:
        """What both searches of the domain take after the caller and the list's scopes (and
        before the probe, `ranked`)."""
        return self.filters, self.text, self.mode, self.limit, self.cursor

    def text_embedded_first(self, svc: Services) -> str | None:
        """The text to embed before the search runs (`ranked`): an authenticated first page by
        meaning with an embedder on another machine; else None."""
        recall = svc.memories.recall
        return self.text if recall.embeds_elsewhere(self.mode, self.cursor) else None


async def search_request(
    query: str = Query(description="What to look for: words, or a question in plain language"),
    mode: SearchMode = Query(
        SearchMode.HYBRID, description="hybrid (keyword and meaning fused), semantic or keyword"
    ),
    limit: int = Query(10, ge=1, le=MAX_LIMIT, description=f"1-{MAX_LIMIT}, default 10"),
    system: str | None = Query(None, description="sensory, working or long_term"),
    type: str | None = Query(None, description="Memory type (valid for the system)"),
    segment: str | None = Query(None, description="user, agent, tool or guideline"),
    status: str | None = Query(None, description="active, superseded, archived or all"),
    cursor: str | None = Query(
        None,
        max_length=512,
        description="`meta.next_cursor` of the previous page of this same search (the same "
        "query, mode, floor and filters; another search's cursor is 422 `invalid_pagination`)",
    ),
    min_score: float | None = Query(
        None,
        ge=0,
        le=1,
        description="Similarity floor, 0-1: leave out memories whose meaning is less similar "
        "to the query (cosine); hybrid floors its meaning leg (a memory found by its words "
        "still counts); not with mode=keyword (422). Default: none (docs/search.md has a "
        "recommended value for the bundled model)",
    ),
    svc: Services = Depends(services),
) -> SearchRequest:
    """The query parameters both search routes share (declare it after the caller's auth)."""
    return SearchRequest(
        text=svc.memories.recall.check_text(query),
        mode=mode,
        limit=limit,
        filters=list_filters(svc, system, type, segment, status, None),
        cursor=cursor,
        min_score=check_floor(min_score, mode),
    )


T = TypeVar("T")


async def ranked(
    svc: Services,
    threads: CapacityLimiter,
    text: str | None,
    check: Callable[[], object],
    run: Callable[[Probe | None], T],
) -> T:
    """`run` on a request thread. When `text` is not None (a search or a ranked list whose
    query an embedder on another machine embeds first), `check` runs first, on the event loop
    (the domain's refusals of the caller and the parameters, reading nothing), then `text` is
    embedded on a thread of `threads` and handed to `run` as its probe: a refused request costs
    no call to the endpoint, and the wait for it holds neither a request thread nor a database
    connection (docs/decisions.md, "A search waits for an embeddings endpoint before it holds
    anything", "Search and recall leftovers")."""
    probe = None
    if text is not None:
        check()
        embed = svc.memories.recall.embedded_first
        probe = await to_thread.run_sync(embed, text, limiter=threads)
    return await to_thread.run_sync(run, probe)
