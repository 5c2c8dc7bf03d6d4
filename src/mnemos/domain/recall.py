"""Recall: a list's memories ranked by keyword, by meaning, or both (docs/search.md).

A search runs over a `MemoryQuery` the visibility rules built, exactly as a list does; the
rankers only order what the query holds (the vector store re-checks every candidate against
it in the database). Modes:

- `keyword`: full-text relevance (the store's `Ranker`: FTS5 bm25 / `ts_rank`).
- `semantic`: cosine similarity of the query's embedding to each memory's vector.
- `hybrid` (default): reciprocal rank fusion of both over the best `HYBRID_DEPTH` of each leg;
  a memory's score is the sum over legs of `1 / (RRF_K + rank)`. Without an embedder, hybrid
  is keyword search and says so in `meta`.

Every mode pages with a signed cursor bound to the search (`search_key`: its words, mode,
filters and audience) holding the last `(score, id)` served: each page is the same fixed order
cut strictly after it, so a page neither repeats nor skips a memory of the pages before
(docs/decisions.md, "Paging a search").

Memories are embedded after they are stored (`embed_pending`, run by every server process and
by `mnemos reindex`): until then keyword search finds them, semantic search does not.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from enum import StrEnum
from functools import partial
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from mnemos.domain.models import Memory
from mnemos.domain.pagination import CursorCodec, RankPosition, RecallPosition
from mnemos.domain.ports import Embedder, MemoryStore, VectorStore
from mnemos.domain.queries import MemoryQuery, Order
from mnemos.domain.search import Ranked, SearchQuery, parse_search
from mnemos.errors import MnemosError, SemanticSearchDisabled, invalid_field

log = logging.getLogger("mnemos")

RRF_K = 60
MAX_LIMIT = 50
HYBRID_DEPTH = 100  # each leg of a hybrid search: its answer is at most twice this
MAX_DEPTH = 1_000  # the deepest a semantic search reads
EMBED_LEASE = timedelta(seconds=30)


class SearchMode(StrEnum):
    HYBRID = "hybrid"
    SEMANTIC = "semantic"
    KEYWORD = "keyword"


class RecallStore(MemoryStore, VectorStore, Protocol):
    """Memories, full-text ranking and vectors."""


@dataclass(frozen=True)
class Recalled:
    """Ranked memories, best first, and what the answer's `meta` says about how."""

    items: list[Ranked]
    meta: dict[str, Any]


def query_words(search: SearchQuery) -> str:
    """A parsed full-text query as text again (for its embedding)."""
    return " ".join([*search.words, *search.whole_words, *(w for p in search.phrases for w in p)])


class Recall:
    """Searches over one store, with an embedder or without (`None`: keyword only); `codec`
    signs the cursors that continue a search."""

    def __init__(
        self,
        store: RecallStore,
        embedder: Embedder | None,
        codec: CursorCodec,
        max_query_chars: int = 500,
    ):
        self.store = store
        self.embedder = embedder
        self.codec = codec
        self.max_query_chars = max_query_chars

    def check_text(self, text: str) -> str:
        if len(text) > self.max_query_chars:
            raise invalid_field("query", f"must be at most {self.max_query_chars} characters")
        if not text.strip():
            raise invalid_field("query", "must not be empty")
        return text

    def search(
        self,
        query: MemoryQuery,
        text: str,
        mode: SearchMode,
        limit: int,
        cursor: str | None = None,
    ) -> Recalled:
        """The best `limit` memories of `query` for `text` (after the position of `cursor`, the
        `next_cursor` of this same search's previous page). A full-text search already on the
        query (a list's `content_query`) is the keyword leg as given; else `text` is parsed."""
        self.check_text(text)
        key = search_key(query, text, mode)
        after = self.codec.decode_recall(cursor, key) if cursor is not None else None
        meta: dict[str, Any] = {"mode": mode.value, "limit": limit}
        probe, fallback = self._probe(text, mode, after)
        if fallback is not None:
            meta.update(mode="keyword", requested_mode=mode.value, fallback=fallback)
        if probe is None:
            strict = mode is SearchMode.KEYWORD
            fetch: Fetch = partial(self._keyword_page, query, text, strict, after)
        else:
            fetch = partial(self._meaning_page, query, text, probe, mode, after)
        items, more = fetch(limit)
        next_cursor = None
        if more:
            served = (after.served if after else 0) + len(items)
            last = items[-1]
            position = RecallPosition(key, meta["mode"], last.score, last.memory.id, served)
            next_cursor = self.codec.encode_recall(position)
        meta.update(has_more=more, next_cursor=next_cursor)
        return Recalled(items, meta)

    def _probe(
        self, text: str, mode: SearchMode, after: RecallPosition | None
    ) -> tuple[NDArray[np.float32] | None, str | None]:
        """The query's embedding (None: rank by keyword), and why hybrid fell back to keyword
        (None: it did not). A search keeps the mode its first page had."""
        if mode is SearchMode.KEYWORD:
            return None, None
        if self.embedder is None:
            if mode is SearchMode.SEMANTIC or (after and after.mode != SearchMode.KEYWORD):
                raise SemanticSearchDisabled()
            return None, "no embedder"
        if after is not None and after.mode == SearchMode.KEYWORD:
            return None, "first page fell back"  # the rest of the search follows its order
        try:
            return self.embedder.embed([text])[0], None
        except MnemosError as exc:  # an embedding service that fails: keyword still answers
            if mode is SearchMode.SEMANTIC or after is not None:
                raise
            log.warning("hybrid search fell back to keyword: %s", exc)
            return None, exc.code

    def _keyword_page(
        self, query: MemoryQuery, text: str, strict: bool, after: RecallPosition | None, limit: int
    ) -> tuple[list[Ranked], bool]:
        """Full-text relevance, continued in the store's own `(score, id)` order."""
        search = query.search
        if search is None:
            try:
                search = parse_search(text, self.max_query_chars, "query")
            except MnemosError:
                if strict:
                    raise
                return [], False  # nothing full text can look for (too many words, no letters)
        ranked = replace(query, search=search, order=Order.RELEVANCE)
        start = RankPosition(after.score, after.id) if after else None
        rows = list(self.store.rank_memories(ranked, limit=limit + 1, after=start))
        return rows[:limit], len(rows) > limit

    def _meaning_page(
        self,
        query: MemoryQuery,
        text: str,
        probe: NDArray[np.float32],
        mode: SearchMode,
        after: RecallPosition | None,
        limit: int,
    ) -> tuple[list[Ranked], bool]:
        """Semantic or hybrid: the answer is a fixed order (below), cut after `after`.

        Semantic: every memory by `(similarity, id)`, read `served + limit + 1` deep (deeper
        while the bound hides what was read), at most `MAX_DEPTH`. Hybrid: the fusion of the
        best `HYBRID_DEPTH` of each leg, the same list for every page of the search."""
        served = after.served if after else 0
        depth = HYBRID_DEPTH if mode is SearchMode.HYBRID else min(MAX_DEPTH, served + limit + 1)
        while True:
            by_meaning = self._nearest(query, probe, depth)
            if mode is SearchMode.HYBRID:
                by_words, _ = self._keyword_page(query, text, False, None, depth)
                ordered = fuse([by_words, by_meaning], 2 * depth)
            else:
                ordered = sorted(by_meaning, key=_order, reverse=True)
            rest = [r for r in ordered if after is None or _order(r) < (after.score, after.id)]
            complete = mode is SearchMode.HYBRID or len(by_meaning) < depth or depth >= MAX_DEPTH
            if len(rest) > limit or complete:
                return rest[:limit], len(rest) > limit
            depth = min(MAX_DEPTH, 2 * depth)

    def _nearest(self, query: MemoryQuery, probe: NDArray[np.float32], limit: int) -> list[Ranked]:
        assert self.embedder is not None
        plain = replace(query, search=None, order=Order.NEWEST)
        return list(self.store.nearest_memories(plain, probe, self.embedder.model, limit))


Fetch = Callable[[int], tuple[list[Ranked], bool]]


def _order(ranked: Ranked) -> tuple[float, uuid.UUID]:
    return ranked.score, ranked.memory.id


def search_key(query: MemoryQuery, text: str, mode: SearchMode) -> str:
    """What a search's cursor is bound to: its words, mode, filters and audience (the query's
    fields are tuples, ids and enums, so their `repr` is the same in every process)."""
    digest = hashlib.sha256(repr((text, mode.value, query)).encode()).digest()
    return base64.urlsafe_b64encode(digest[:12]).decode()


def fuse(legs: Sequence[Sequence[Ranked]], limit: int) -> list[Ranked]:
    """Reciprocal rank fusion: each leg adds `1 / (RRF_K + rank)` to a memory's score; best
    first by `(score, id)`."""
    scores: dict[uuid.UUID, float] = {}
    found: dict[uuid.UUID, Memory] = {}
    for leg in legs:
        for rank, ranked in enumerate(leg, start=1):
            memory_id = ranked.memory.id
            scores[memory_id] = scores.get(memory_id, 0.0) + 1.0 / (RRF_K + rank)
            found.setdefault(memory_id, ranked.memory)
    best = sorted(scores, key=lambda memory_id: (scores[memory_id], memory_id), reverse=True)
    return [Ranked(found[memory_id], scores[memory_id]) for memory_id in best[:limit]]


def embed_pending(store: VectorStore, embedder: Embedder, batch: int = 32) -> int:
    """Embed up to `batch` queued memories; how many were taken from the queue."""
    claimed = store.claim_unembedded(batch, EMBED_LEASE)
    if not claimed:
        return 0
    vectors = embedder.embed([content for _, content in claimed])
    store.save_vectors(embedder.model, [memory_id for memory_id, _ in claimed], vectors)
    return len(claimed)
