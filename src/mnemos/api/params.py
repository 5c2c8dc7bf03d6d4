"""Query parameters every memory list shares, parsed into domain values."""

from __future__ import annotations

from dataclasses import dataclass, replace

from anyio import CapacityLimiter, to_thread
from fastapi import Depends, Query, Request

from mnemos.api.deps import Services, services
from mnemos.domain.models import MemoryType, Segment, System, parse_enum
from mnemos.domain.pagination import PageRequest, parse_page
from mnemos.domain.probes import Probe
from mnemos.domain.queries import Filters, status_filter
from mnemos.domain.recall import MAX_LIMIT, SearchMode
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
    probe: Probe | None = None
    """A ranked list's query embedded first (`MemoryService.ranked_list_text`)."""


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
    threads: CapacityLimiter = Depends(remote_embed_threads),
) -> ListQuery:
    """The query parameters every memory list shares (declare it after the caller's auth).

    Async because it only parses (a sync dependency would cost a thread-pool hop per request),
    and a list ranked by an embeddings endpoint has its query embedded here (`search_request`).
    """
    found = ListQuery(
        page=page_request(svc, cursor, limit, page, page_size),
        filters=list_filters(svc, system, type, segment, status, content_query),
    )
    text = svc.memories.ranked_list_text(found.filters)
    if text is None:
        return found
    probe = await to_thread.run_sync(svc.memories.recall.embedded_first, text, limiter=threads)
    return replace(found, probe=probe)


@dataclass(frozen=True)
class SearchRequest:
    """A search's text, mode, size and list filters, parsed."""

    text: str
    mode: SearchMode
    limit: int
    filters: Filters
    cursor: str | None
    probe: Probe | None = None
    """The query's embedding, done before the search by an embedder on another machine."""

    @property
    def arguments(self) -> tuple[Filters, str, SearchMode, int, str | None, Probe | None]:
        """What both searches of the domain take after the caller and the list's scopes."""
        return self.filters, self.text, self.mode, self.limit, self.cursor, self.probe


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
        "query, mode and filters; another search's cursor is 422 `invalid_pagination`)",
    ),
    svc: Services = Depends(services),
    threads: CapacityLimiter = Depends(remote_embed_threads),
) -> SearchRequest:
    """The query parameters both search routes share (declare it after the caller's auth:
    with an embeddings endpoint, the query is embedded here, for authenticated callers only)."""
    recall = svc.memories.recall
    search = SearchRequest(
        text=recall.check_text(query),
        mode=mode,
        limit=limit,
        filters=list_filters(svc, system, type, segment, status, None),
        cursor=cursor,
    )
    if not recall.embeds_elsewhere(mode, cursor):
        return search
    probe = await to_thread.run_sync(recall.embedded_first, search.text, limiter=threads)
    return replace(search, probe=probe)
