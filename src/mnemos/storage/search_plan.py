"""How a newest-first search runs, chosen before it runs from the index's own statistics.

A full-text search costs what its terms' index entries cost to read (FTS5 merges the entries of
every word a prefix covers; a GIN partial match builds a bitmap of them all), plus one row fetch
per candidate the index hands back. Words that are each common but rarely together (issue 11,
finding 4: `babab babag ...`) make both large while the answer stays empty. So each search is
planned from per-term estimates of how many memories hold the term (SQLite: the pages each term
spans in the FTS5 segment index; PostgreSQL: the column's `most_common_elems` statistics):

1. **Walk** the newest `WALK_ROWS` memories of each audience (its own ordered index), checking
   every term on the row, when the terms look common enough that a page is likely to be there
   (`WALK_EXPECTED_ROWS`), or when no term is cheap enough to look up. A walk that fills the page,
   or reaches the end of the audience, is the exact answer.
2. Else **look up** in the index only the rarest terms, cheapest first, while their estimated
   entries add up to at most `DRIVER_POSTINGS`; check the other terms on the rows found.
3. If even the rarest term has more entries than that and the walk did not fill the page, its
   terms are counted in the search's own audiences (`own_plan`): the estimates are of every
   tenant's memories, and a word another tenant holds 30,000 times may be rare for this one.
   Only if no term is rare enough there either is the search refused (422
   `search_too_expensive`).

The results are those of matching every term in the index: only the work differs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from mnemos.domain.search import SearchQuery, joined

WALK_ROWS = 1_000
"""The most rows a walk reads per audience (about 2-4 ms on SQLite)."""
WALK_EXPECTED_ROWS = 500
"""Walk first when, by the term estimates, a page of matches is expected within this many rows."""
WALK_MAX_AUDIENCES = 4
"""A list over more audiences than this is not walked (each would read `WALK_ROWS` rows)."""
DRIVER_POSTINGS = 30_000
"""The most index entries (memories holding a term, estimated) a search may look up."""


@dataclass(frozen=True)
class TermStats:
    """Estimates for one search: how many memories there are, and how many hold each of its
    parts (`SearchQuery.parts()`, in that order)."""

    rows: int
    postings: tuple[int, ...]


@dataclass(frozen=True)
class SearchPlan:
    """`walk`: first read the newest rows of each audience. `driver`: then the terms to look up
    in the index (None: refuse); `recheck`: the driver is not the whole query, so the rows it
    finds are checked against every term."""

    walk: bool
    driver: SearchQuery | None
    recheck: bool


def plan_search(search: SearchQuery, stats: TermStats | None, limit: int) -> SearchPlan:
    """The plan for a newest-first page of `limit` matches of `search` (see the module)."""
    if stats is None:  # no statistics yet: the index lookup, as it always was
        return SearchPlan(walk=False, driver=search, recheck=False)
    parts = search.parts()
    by_cost = sorted(range(len(parts)), key=lambda index: stats.postings[index])
    chosen: list[int] = []
    total = 0
    for index in by_cost:
        if total + stats.postings[index] > DRIVER_POSTINGS:
            break
        chosen.append(index)
        total += stats.postings[index]
    driver = joined([parts[index] for index in sorted(chosen)]) if chosen else None
    share = math.prod(min(1.0, count / max(stats.rows, 1)) for count in stats.postings)
    expected_rows = limit / share if share > 0 else math.inf
    walk = driver is None or expected_rows <= WALK_EXPECTED_ROWS
    return SearchPlan(walk=walk, driver=driver, recheck=len(chosen) < len(parts))


def own_plan(
    search: SearchQuery, stats: TermStats, limit: int, count: Callable[[SearchQuery, int], int]
) -> SearchPlan:
    """The plan once the terms too common to look up in the whole index are counted in the
    search's own audiences, rarest first until one is rare enough there: `count(part, most)`
    is how many of the audiences' memories hold `part`, read up to `most` + 1 (it costs what
    looking the part up for them costs). Another tenant's memories then never get a search
    refused that is cheap for the caller's own (review18, finding 2)."""
    postings = list(stats.postings)
    parts = search.parts()
    for index in sorted(range(len(parts)), key=lambda index: stats.postings[index]):
        postings[index] = min(postings[index], count(parts[index], DRIVER_POSTINGS))
        if postings[index] <= DRIVER_POSTINGS:
            break
    return plan_search(search, replace(stats, postings=tuple(postings)), limit)
