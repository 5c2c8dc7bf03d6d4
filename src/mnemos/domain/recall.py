"""Recall: a list's memories ranked by keyword, by meaning, or both (docs/search.md).

A search runs over a `MemoryQuery` the visibility rules built, exactly as a list does; the
rankers only order what the query holds (the vector store re-checks every candidate against
it in the database). Modes:

- `keyword`: full-text relevance (the store's `Ranker`: FTS5 bm25 / `ts_rank`).
- `semantic`: cosine similarity of the query's embedding to each memory's vector.
- `hybrid` (default): reciprocal rank fusion of both, each leg fetching twice the limit; a
  memory's score is the sum over legs of `1 / (RRF_K + rank)`. Without an embedder, hybrid is
  keyword search and says so in `meta`.

Memories are embedded after they are stored (`embed_pending`, run by every server process and
by `mnemos reindex`): until then keyword search finds them, semantic search does not.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from enum import StrEnum
from typing import Any, Protocol

from mnemos.domain.models import Memory
from mnemos.domain.ports import Embedder, MemoryStore, VectorStore
from mnemos.domain.queries import MemoryQuery, Order
from mnemos.domain.search import Ranked, SearchQuery, parse_search
from mnemos.errors import MnemosError, SemanticSearchDisabled, invalid_field

log = logging.getLogger("mnemos")

RRF_K = 60
MAX_LIMIT = 50
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
    """Searches over one store, with an embedder or without (`None`: keyword only)."""

    def __init__(self, store: RecallStore, embedder: Embedder | None, max_query_chars: int = 500):
        self.store = store
        self.embedder = embedder
        self.max_query_chars = max_query_chars

    def check_text(self, text: str) -> str:
        if len(text) > self.max_query_chars:
            raise invalid_field("query", f"must be at most {self.max_query_chars} characters")
        if not text.strip():
            raise invalid_field("query", "must not be empty")
        return text

    def search(self, query: MemoryQuery, text: str, mode: SearchMode, limit: int) -> Recalled:
        """The best `limit` memories of `query` for `text`. A full-text search already on the
        query (a list's `content_query`) is the keyword leg as given; else `text` is parsed."""
        self.check_text(text)
        meta: dict[str, Any] = {"mode": mode.value, "limit": limit}
        if mode is SearchMode.KEYWORD:
            return Recalled(self._keyword(query, text, limit, strict=True), meta)
        if self.embedder is None:
            if mode is SearchMode.SEMANTIC:
                raise SemanticSearchDisabled()
            meta.update(mode="keyword", requested_mode="hybrid", fallback="no embedder")
            return Recalled(self._keyword(query, text, limit, strict=False), meta)
        if mode is SearchMode.SEMANTIC:
            return Recalled(self._semantic(query, text, limit), meta)
        depth = 2 * limit
        try:
            by_meaning = self._semantic(query, text, depth)
        except MnemosError as exc:  # an embedding service that fails: keyword still answers
            log.warning("hybrid search fell back to keyword: %s", exc)
            meta.update(mode="keyword", requested_mode="hybrid", fallback=exc.code)
            return Recalled(self._keyword(query, text, limit, strict=False), meta)
        by_words = self._keyword(query, text, depth, strict=False)
        return Recalled(fuse([by_words, by_meaning], limit), meta)

    def _keyword(self, query: MemoryQuery, text: str, limit: int, strict: bool) -> list[Ranked]:
        search = query.search
        if search is None:
            try:
                search = parse_search(text, self.max_query_chars, "query")
            except MnemosError:
                if strict:
                    raise
                return []  # nothing full text can look for (too many words, no letters)
        ranked = replace(query, search=search, order=Order.RELEVANCE)
        return list(self.store.rank_memories(ranked, limit=limit))

    def _semantic(self, query: MemoryQuery, text: str, limit: int) -> list[Ranked]:
        assert self.embedder is not None
        probe = self.embedder.embed([text])[0]
        plain = replace(query, search=None, order=Order.NEWEST)
        found = self.store.nearest_memories(plain, probe, self.embedder.model, limit)
        return list(found)


def fuse(legs: Sequence[Sequence[Ranked]], limit: int) -> list[Ranked]:
    """Reciprocal rank fusion: each leg adds `1 / (RRF_K + rank)` to a memory's score."""
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
