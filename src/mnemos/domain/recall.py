"""Recall: a list's memories ranked by keyword, by meaning, or both (docs/search.md).

A search runs over a `MemoryQuery` the visibility rules built, exactly as a list does; the
rankers only order what the query holds (the vector store re-checks every candidate against
it in the database). Modes:

- `keyword`: full-text relevance (the store's `Ranker`: `search.relevance` / `ts_rank`, each
  read from the memory alone); a memory's score is `1 / (RRF_K + rank)`, its rank alone (the
  engines' scales differ).
- `semantic`: cosine similarity of the query's embedding to each memory's vector.
- `hybrid` (default): reciprocal rank fusion of both over the best `HYBRID_DEPTH` of each leg;
  a memory's score is the sum over legs of `1 / (RRF_K + rank)`. The keyword leg may rank only
  the newest `HYBRID_POOL` matches of each audience (a common word matches a tenth of a million
  memories; the meaning leg ranks every memory), never fewer than its `HYBRID_DEPTH` when more
  match (`Store.rank_memories`). Without an embedder (or with one failing), hybrid is keyword
  search, refusals included, and says so in `meta`; a keyword leg the store refuses
  (`search_too_expensive`) leaves the meaning leg to answer alone, saying so too.

The first page computes the search's whole ordered answer by id (at most `MAX_DEPTH` memories,
or `2 * HYBRID_DEPTH` for hybrid), reads the rows of the memories its page returns, and keeps
the rest of the answer (`SearchPages`, for `KEPT_FOR`); its
signed cursor is bound to the search (`search_key`: its words, mode, filters and audience) and
names the kept answer and an offset in it. A later page serves the next ids of that answer,
each checked again against the query: nothing repeats, nothing that still matches is skipped,
what was removed or changed meanwhile drops out, and what was stored meanwhile is not added
(docs/decisions.md, "Paging a search from its first answer").

Memories are embedded after they are stored (`embed_pending`, run by every server process and
by `mnemos reindex`): until then keyword search finds them, semantic search does not.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import secrets
import uuid
from collections.abc import Callable, Collection, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import timedelta
from enum import StrEnum
from typing import Any, Protocol

import numpy as np

from mnemos.domain.ids import utcnow
from mnemos.domain.pagination import CursorCodec, RecallPosition
from mnemos.domain.ports import Embedder, MemoryStore, SearchPages, VectorStore
from mnemos.domain.probes import Probe, Probes
from mnemos.domain.queries import MemoryQuery, Order
from mnemos.domain.search import Ranked, Scored, SearchQuery, parse_search
from mnemos.errors import (
    EmbedderRefused,
    InvalidPagination,
    MnemosError,
    SearchTooExpensive,
    SemanticSearchDisabled,
    ValidationFailed,
    invalid_field,
)

log = logging.getLogger("mnemos")

RRF_K = 60
MAX_LIMIT = 50
HYBRID_DEPTH = 100  # each leg of a hybrid search: its answer is at most twice this
HYBRID_POOL = 500  # a hybrid's keyword leg scores at most this many newest matches per audience
MAX_DEPTH = 200  # the most a keyword or semantic search answers (hybrid: 2 * HYBRID_DEPTH)
KEPT_FOR = timedelta(minutes=30)  # how long a search's later pages can be read
KEPT_PER_CALLER = 100  # answers kept per caller: a newer search drops its oldest kept answer
EMBED_LEASE = timedelta(seconds=30)
OTHER_MODEL = "other_model_indexed"
"""What a search by meaning says (hybrid: its `fallback`; semantic: its `note`) when the memories
it reads hold vectors of another model only: the database was reindexed under another embedder
than this server's (`models_apart`)."""


class SearchMode(StrEnum):
    HYBRID = "hybrid"
    SEMANTIC = "semantic"
    KEYWORD = "keyword"


class RecallStore(MemoryStore, VectorStore, SearchPages, Protocol):
    """Memories, full-text ranking, vectors and the kept answers of searches being paged."""


@dataclass(frozen=True)
class Recalled:
    """Ranked memories, best first, and what the answer's `meta` says about how."""

    items: list[Ranked]
    meta: dict[str, Any]


@dataclass(frozen=True)
class Fallback:
    """How a hybrid search answered when one leg could not: by `mode` alone, because of
    `reason` (its answer's `meta.fallback`: the other leg's error code, or "no embedder"). For
    a semantic search (`mode` the one asked), why it found nothing (`meta.note`)."""

    mode: SearchMode
    reason: str


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
        kept_per_caller: int = KEPT_PER_CALLER,
        embed_threads: int = 1,
    ):
        """`embed_threads`: how many queries may be embedded at once beside their searches'
        reads (`Probes`): the number of requests the process serves at once."""
        self.store = store
        self.embedder = embedder
        self.codec = codec
        self.max_query_chars = max_query_chars
        self.kept_per_caller = kept_per_caller
        self.probes = Probes(embedder, embed_threads) if embedder is not None else None

    def close(self) -> None:
        """Stop the threads that embed queries (`Probes`)."""
        if self.probes is not None:
            self.probes.close()

    def check_text(self, text: str) -> str:
        if len(text) > self.max_query_chars:
            raise invalid_field("query", f"must be at most {self.max_query_chars} characters")
        if not text.strip():
            raise invalid_field("query", "must not be empty")
        return text

    def embeds_elsewhere(self, mode: SearchMode, cursor: str | None) -> bool:
        """Whether a search's query should be embedded before the search runs
        (`embedded_first`): by an embedder on another machine, for a first page by meaning."""
        remote = self.probes is not None and self.probes.remote
        return remote and mode is not SearchMode.KEYWORD and cursor is None

    def embedded_first(self, text: str) -> Probe:
        """`text`'s embedding by an embedder on another machine, done before the search runs:
        the wait (up to the endpoint's timeout) then holds neither a request thread nor a
        database connection, so a slow embedding service slows only the searches that need
        it. A failure is kept in the probe: the search raises it, or falls back to keyword."""
        assert self.probes is not None
        return self.probes.now(self.check_text(text))

    def search(
        self,
        query: MemoryQuery,
        text: str,
        mode: SearchMode,
        limit: int,
        cursor: str | None = None,
        *,
        caller: str,
        probe: Probe | None = None,
        min_score: float | None = None,
    ) -> Recalled:
        """The best `limit` (1 to `MAX_LIMIT`) memories of `query` for `text`, or the next
        `limit` of this same search's answer after `cursor` (its previous page's
        `next_cursor`). A full-text search already on the query (a list's `content_query`) is
        the keyword leg as given; else `text` is parsed. `caller` names who searches: each
        caller keeps at most `kept_per_caller` answers for later pages (its oldest cursor then
        says "expired"), so no caller can fill the database with them. `probe`: the query's
        embedding when it was done first (`embedded_first`). `min_score`: the similarity floor
        (`check_floor`), part of the search its cursor continues."""
        self.check_text(text)
        check_limit(limit)
        check_floor(min_score, mode)
        key = search_key(query, text, mode, min_score)
        if cursor is not None:
            after = self.codec.decode_recall(cursor, key)
            return self._later_page(query, mode, after, limit, min_score)
        meta: dict[str, Any] = {"mode": mode.value, "limit": limit, **_floor_meta(min_score)}
        ordered, fallback = self.answer(query, text, mode, MAX_DEPTH, probe, min_score)
        if fallback is not None:
            if fallback.mode is mode:  # answered as asked, saying why it found nothing
                meta["note"] = fallback.reason
            else:
                meta.update(
                    mode=fallback.mode.value, requested_mode=mode.value, fallback=fallback.reason
                )
        items, more = self._page(query, ordered, 0, limit)
        next_cursor = None
        if more is not None:
            kept = secrets.token_urlsafe(18)
            rest = [(scored.id, scored.score) for scored in ordered[more:]]
            self.store.keep_search(kept, rest, utcnow() + KEPT_FOR, caller, self.kept_per_caller)
            next_cursor = self.codec.encode_recall(RecallPosition(key, meta["mode"], kept, 0))
        meta.update(has_more=next_cursor is not None, next_cursor=next_cursor)
        return Recalled(items, meta)

    def answer(
        self,
        query: MemoryQuery,
        text: str,
        mode: SearchMode,
        depth: int,
        embedded: Probe | None = None,
        min_score: float | None = None,
    ) -> tuple[list[Scored], Fallback | None]:
        """A search's whole ordered answer by id, best first (at most `depth` memories by
        keyword or by meaning; hybrid fuses the best `HYBRID_DEPTH` of each leg), and how a
        hybrid search answered when one of its legs could not (None: both did). By meaning,
        only memories whose similarity is at least `min_score`, if given (hybrid: its meaning
        leg; a memory found by its words still counts).

        The query's embedding runs beside the reads that do not need it (`Probes`): the
        owners' sign bits, and a hybrid's keyword leg (read first: the longer of the two);
        `embedded`, when the query was embedded first (`embedded_first`), replaces it."""
        if mode is SearchMode.KEYWORD:
            return self._by_words(query, text, True, depth), None
        if self.probes is None:
            if mode is SearchMode.SEMANTIC:
                raise SemanticSearchDisabled()
            return self._by_words_alone(query, text, depth, "no embedder")
        started = self.probes.ahead(text) if embedded is None else nullcontext(embedded)
        with started as probe:
            if mode is SearchMode.SEMANTIC:
                found, other_model = self._nearest(query, probe, depth, min_score)
                return found, Fallback(mode, OTHER_MODEL) if other_model else None
            return self._hybrid(query, text, probe, depth, min_score)

    def _hybrid(
        self, query: MemoryQuery, text: str, probe: Probe, depth: int, min_score: float | None
    ) -> tuple[list[Scored], Fallback | None]:
        """Both legs fused; one leg alone, saying so, when the other cannot answer: by words
        when the embedder fails (as `mode=keyword` answers, its refusals included), by meaning
        when the store refuses the words (`search_too_expensive`: its time budget)."""
        try:
            by_words = self._by_words(query, text, False, HYBRID_DEPTH, HYBRID_POOL)
        except SearchTooExpensive as refused:
            try:
                by_meaning, other_model = self._nearest(query, probe, depth, min_score)
            except MnemosError as failed:  # neither leg answers: as keyword alone would
                if probe.failed_with(failed):
                    raise refused from None
                raise
            if other_model:  # nor does the meaning leg, of another model's vectors
                raise refused from None
            log.info("hybrid search answered by meaning alone: %s", refused.message)
            return by_meaning, Fallback(SearchMode.SEMANTIC, refused.code)
        try:
            by_meaning, other_model = self._nearest(query, probe, HYBRID_DEPTH, min_score)
        except MnemosError as exc:  # an embedding service that fails: keyword still answers
            if not probe.failed_with(exc):
                raise
            log.warning("hybrid search fell back to keyword: %s", exc)
            return self._by_words_alone(query, text, depth, exc.code, exc)
        if other_model:
            return self._by_words_alone(query, text, depth, OTHER_MODEL)
        return fuse([by_words, by_meaning], 2 * HYBRID_DEPTH), None

    def _by_words_alone(
        self,
        query: MemoryQuery,
        text: str,
        depth: int,
        reason: str,
        failure: MnemosError | None = None,
    ) -> tuple[list[Scored], Fallback]:
        """A hybrid search without its meaning leg (`reason`): answered as `mode=keyword`
        answers, so a query full text cannot take (more than `MAX_TERMS` words, no letter) is
        its 422, whose details name the fallback, rather than an empty answer. When the leg is
        missing for a while only (`failure`: the embedding service's error), that query is
        refused with the failure instead (503): a 422 would tell the client to change a
        question that answers once the service is back (review25 finding 2)."""
        try:
            found = self._by_words(query, text, True, depth)
        except ValidationFailed as refused:
            if failure is not None:
                raise failure from None
            details = {**(refused.details or {}), "fallback": reason}
            raise ValidationFailed(refused.message, details=details) from None
        return found, Fallback(SearchMode.KEYWORD, reason)

    def _later_page(
        self,
        query: MemoryQuery,
        mode: SearchMode,
        after: RecallPosition,
        limit: int,
        min_score: float | None,
    ) -> Recalled:
        """The next `limit` memories of the answer the first page kept, from `after.offset`."""
        kept = self.store.kept_search(after.kept)
        if kept is None:
            raise InvalidPagination(
                "This search has expired: search again", details={"cursor": "expired"}
            )
        meta: dict[str, Any] = {"mode": after.mode, "limit": limit, **_floor_meta(min_score)}
        if after.mode != mode.value:
            meta.update(requested_mode=mode.value, fallback="first page fell back")
        answer = [Scored(memory_id, score) for memory_id, score in kept]
        items, more = self._page(query, answer, after.offset, limit)
        next_cursor = None
        if more is not None:
            next_cursor = self.codec.encode_recall(replace(after, offset=more))
        meta.update(has_more=next_cursor is not None, next_cursor=next_cursor)
        return Recalled(items, meta)

    def read(self, query: MemoryQuery, answer: Sequence[Scored]) -> list[Ranked]:
        """The memories of `answer`, in its order, that the query still returns."""
        return self._page(query, answer, 0, len(answer))[0]

    def _page(
        self, query: MemoryQuery, answer: Sequence[Scored], offset: int, limit: int
    ) -> tuple[list[Ranked], int | None]:
        """The first `limit` memories of `answer` from `offset` that the query still returns
        (each read and checked against it: gone, changed or no longer visible is skipped), and
        the offset of the next page (None: nothing after them still matches)."""
        live = replace(query, search=None, order=Order.NEWEST)
        found: list[tuple[int, Ranked]] = []
        at = offset
        while at < len(answer) and len(found) <= limit:
            # The page and one more (whether a next page exists); past memories that dropped
            # out, chunks as large as a page can be, so a few statements read any answer.
            size = limit + 1 if at == offset else MAX_LIMIT + 1
            chunk = answer[at : at + size]
            ids = tuple(scored.id for scored in chunk)
            rows = self.store.list_memories(replace(live, memory_ids=ids), limit=len(ids))
            alive = {memory.id: memory for memory in rows}
            found.extend(
                (at + n, Ranked(alive[scored.id], scored.score))
                for n, scored in enumerate(chunk)
                if scored.id in alive
            )
            at += len(chunk)
        more = found[limit - 1][0] + 1 if len(found) > limit else None
        return [ranked for _, ranked in found[:limit]], more

    def _by_words(
        self, query: MemoryQuery, text: str, strict: bool, depth: int, pool: int | None = None
    ) -> list[Scored]:
        """The best `depth` by full-text relevance (among the newest `pool` matches, if given),
        in the store's order; each scored by its rank alone, `1 / (RRF_K + rank)` (the store's
        own score is not shown: each backend has its own scale)."""
        search = query.search
        if search is None:
            try:
                search = parse_search(text, self.max_query_chars, "query")
            except MnemosError:
                if strict:
                    raise
                return []  # nothing full text can look for (too many words, no letters)
        ranked = replace(query, search=search, order=Order.RELEVANCE)
        rows = self.store.rank_memories(ranked, limit=depth, pool=pool)
        return [Scored(row.id, 1.0 / (RRF_K + rank)) for rank, row in enumerate(rows, 1)]

    def _other_model_only(self, query: MemoryQuery) -> bool:
        """Whether the memories `query` reads hold vectors of another model than this server's
        (asked only when a search by meaning found none of its own model there: one more
        statement, for an empty answer only)."""
        assert self.embedder is not None
        plain = replace(query, search=None, order=Order.NEWEST)
        return self.store.other_model_vectors(plain, self.embedder.model) is not None

    def _nearest(
        self, query: MemoryQuery, probe: Probe, limit: int, min_score: float | None = None
    ) -> tuple[list[Scored], bool]:
        """The nearest `limit` by cosine, best first, those at least `min_score` if given (a
        prefix: a filter over at most `MAX_DEPTH` scores, no other read); and whether nothing
        was found because the memories hold vectors of another model only (asked only when
        none of this model was found, before any floor)."""
        assert self.embedder is not None
        plain = replace(query, search=None, order=Order.NEWEST)
        found = list(self.store.nearest_memories(plain, probe, self.embedder.model, limit))
        probe()  # a failed embedding fails the search even where the store did not need it
        if not found:
            return found, self._other_model_only(query)
        if min_score is not None:
            found = [scored for scored in found if scored.score >= min_score]
        return found, False


def check_limit(limit: int) -> int:
    """A search's page size: 1 to `MAX_LIMIT`, else 422 `invalid_pagination`."""
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidPagination(
            f"limit must be between 1 and {MAX_LIMIT}",
            details={"limit": f"must be 1..{MAX_LIMIT}"},
        )
    return limit


def check_floor(min_score: float | None, mode: SearchMode) -> float | None:
    """A search's similarity floor: a cosine from 0 to 1, for a search by meaning (semantic or
    hybrid: a keyword search's scores are ranks, which no floor fits); else 422."""
    if min_score is None:
        return None
    if not 0 <= min_score <= 1:  # NaN too
        raise invalid_field("min_score", "must be between 0 and 1")
    if mode is SearchMode.KEYWORD:
        raise invalid_field("min_score", "applies to mode=semantic or hybrid, not keyword")
    return min_score


def _floor_meta(min_score: float | None) -> dict[str, float]:
    return {} if min_score is None else {"min_score": min_score}


def models_apart(held: Collection[str], model: str) -> str | None:
    """What an operator is told (`mnemos doctor`, a server's log at start) when the database
    holds vectors of other models than `model`, the embedder's: searches by meaning then find
    only the memories with a vector of `model` (none, after a reindex under another embedder).
    None when it holds none of another model. Nothing re-embeds them by itself (docs/search.md,
    "Reindexing")."""
    others = sorted(set(held) - {model})
    if not others:
        return None
    which = "also" if model in held else "none"
    return (
        f"the database holds vectors of {', '.join(others)} and {which} of {model} "
        "(MNEMOS_EMBEDDER here): memories embedded only by another model are not found by "
        "meaning; run `mnemos reindex --switch-model` with these MNEMOS_EMBEDDER settings to "
        "replace them, or serve with the embedder that made them"
    )


def search_key(
    query: MemoryQuery, text: str, mode: SearchMode, min_score: float | None = None
) -> str:
    """What a search's cursor is bound to: its words, mode, floor, filters and audience (the
    query's fields are tuples, ids and enums, so their `repr` is the same in every process;
    a search without a floor keys as before floors existed)."""
    searched = (
        (text, mode.value, query) if min_score is None else (text, mode.value, query, min_score)
    )
    digest = hashlib.sha256(repr(searched).encode()).digest()
    return base64.urlsafe_b64encode(digest[:12]).decode()


def fuse(legs: Sequence[Sequence[Scored]], limit: int) -> list[Scored]:
    """Reciprocal rank fusion: each leg adds `1 / (RRF_K + rank)` to a memory's score; best
    first by `(score, id)`."""
    scores: dict[uuid.UUID, float] = {}
    for leg in legs:
        for rank, scored in enumerate(leg, start=1):
            scores[scored.id] = scores.get(scored.id, 0.0) + 1.0 / (RRF_K + rank)
    best = sorted(scores, key=lambda memory_id: (scores[memory_id], memory_id), reverse=True)
    return [Scored(memory_id, scores[memory_id]) for memory_id in best[:limit]]


def adopt_former_vectors(store: VectorStore, embedder: Embedder) -> int:
    """Record under the embedder's model the vectors saved under its former name
    (`Embedder.former_model`: an endpoint's bare name, without the size, as code before
    migration 0026 recorded it) with its size; how many. During a rolling upgrade across 0026
    the processes not restarted yet keep saving them so: nothing would queue those memories
    again, and no search by meaning would find them (review23, finding 4). Nothing to do for an
    embedder without a former name (the local model's is its own)."""
    former = getattr(embedder, "former_model", None)  # optional on the port
    if not former or former == embedder.model:
        return 0
    adopted = store.adopt_vectors(former, embedder.model, embedder.dimensions)
    if adopted:
        log.info("%d vectors saved as %r recorded as %r", adopted, former, embedder.model)
    return adopted


def embed_pending(
    store: VectorStore,
    embedder: Embedder,
    batch: int = 32,
    give_way: Callable[[], object] | None = None,
) -> int:
    """Embed up to `batch` queued memories; how many were taken from the queue.

    With `give_way`, the work is cut into steps (the claim, each text's embedding, the save)
    and `give_way` is called before each: a server's embedding worker waits there while its
    process handles requests (`mnemos.indexer.InFlight`). Without it (`mnemos reindex`), the
    batch's texts go to the embedder in one call, or one at a time when it refuses that call.

    A text the embedder refuses (`EmbedderRefused`: an endpoint's 400/413, a text past its
    model's context) costs its own memory only: the others are saved, and the refusal counted
    against it (`VectorStore.refuse_vectors`: set aside after a few). Any other failure (the
    embedder is down) raises, and the batch's claim expires to be retried."""
    if give_way is not None:
        give_way()
    claimed = store.claim_unembedded(batch, EMBED_LEASE)
    if not claimed:
        return 0
    ids = [memory_id for memory_id, _ in claimed]
    texts = [content for _, content in claimed]
    refused: list[int] = []
    if give_way is None:
        try:
            vectors = embedder.embed(texts)
        except EmbedderRefused:
            if len(texts) == 1:
                refused = [0]
                vectors = np.empty((0, embedder.dimensions), dtype=np.float32)
            else:
                refused, vectors = _each_alone(embedder, texts, None)
    else:
        refused, vectors = _each_alone(embedder, texts, give_way)
        give_way()
    if refused:
        set_aside = store.refuse_vectors([ids[index] for index in refused])
        log.warning(
            "the embedder refused %d of %d memories (%d now set aside until `mnemos reindex`): %s",
            len(refused),
            len(ids),
            set_aside,
            ", ".join(str(ids[index]) for index in refused),
        )
    kept = [memory_id for index, memory_id in enumerate(ids) if index not in refused]
    store.save_vectors(embedder.model, kept, vectors)
    return len(claimed)


def _each_alone(
    embedder: Embedder, texts: Sequence[str], give_way: Callable[[], object] | None
) -> tuple[list[int], Any]:
    """Each text embedded alone (`give_way` called before each): the indexes of those the
    embedder refused, and the others' vectors, in order."""
    refused: list[int] = []
    rows = [np.empty((0, embedder.dimensions), dtype=np.float32)]
    for index, text in enumerate(texts):
        if give_way is not None:
            give_way()
        try:
            rows.append(embedder.embed([text]))
        except EmbedderRefused:
            refused.append(index)
    return refused, np.concatenate(rows)
