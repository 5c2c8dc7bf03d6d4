"""Full-text queries: what a caller typed, reduced to words and phrases every backend can match.

Semantics (the same on every backend): words match in any order, case- and accent-insensitively;
each bare word of at least `MIN_PREFIX_CHARS` characters matches as a prefix (`pref` finds
"preferences"), a shorter one only as a whole word (`e` finds "e-mail", not "every"); text in
double quotes is a phrase whose words must stand next to each other in that order. Everything that
is not a letter or a digit separates words, so no operator syntax of the underlying engine can
reach it. A word over `MAX_WORD_BYTES` is indexed and searched by its first `MAX_WORD_BYTES`.

Cost: a prefix is matched by merging the index entries of every word that starts with it, so a
one- or two-letter prefix touches almost every memory (issue 11, finding 4: `b a` took 2.4 s at
300,000 memories). Hence the minimum prefix length, the cap of `MAX_TERMS` distinct terms, and
dropping a prefix that another term of the query already implies (`har harbor` is `harbor`).

Both the stored text and the query go through `words_of`, so every backend indexes exactly the
same words: storage indexes `index_text(content)`, never the raw content.

Ranking: a list with `Order.NEWEST` uses a search as a filter; one with `Order.RELEVANCE` asks a
`Ranker` for the matches best first, each with its score. The store ranks full text by a score
read from the matched memory alone, never from other memories (another tenant's words must not
move a tenant's order): `relevance` on SQLite, `ts_rank` on PostgreSQL. Another ranker (by
meaning, or a fusion of two) implements the same protocol, and the domain re-applies nothing: a
ranker runs the query's audiences as given.
"""

from __future__ import annotations

import re
import unicodedata
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

from mnemos.domain.models import Memory
from mnemos.errors import invalid_field

if TYPE_CHECKING:
    from mnemos.domain.queries import MemoryQuery

_WORD = re.compile(r"[^\W_]+")
MAX_TERMS = 8
MIN_PREFIX_CHARS = 3
SATURATION = 1.2  # `relevance`: occurrences of a term past a few add little (BM25's k1)
LENGTH_WEIGHT = 0.75  # how much a memory's length damps its occurrences (BM25's b)
TYPICAL_WORDS = 20  # the length at which that damping is neutral: a constant, not a statistic
MAX_WORD_BYTES = 2047
"""The longest word (UTF-8 bytes) every backend indexes: PostgreSQL's `to_tsvector` skips a
longer one. Stored and searched words are cut to it (`words_of`), so a long word's prefix
finds it on both backends (review18, finding 8)."""
_SHORT_WORD = MAX_WORD_BYTES // 4  # characters: a word this short cannot be over the limit


@dataclass(frozen=True)
class SearchQuery:
    """Prefix-matched words, whole words and exact phrases, all of which must match."""

    words: tuple[str, ...]  # each matches any word that starts with it
    phrases: tuple[tuple[str, ...], ...]
    whole_words: tuple[str, ...] = ()  # shorter than MIN_PREFIX_CHARS: whole words only

    @property
    def terms(self) -> int:
        phrase_words = sum(len(phrase) for phrase in self.phrases)
        return len(self.words) + len(self.whole_words) + phrase_words

    def parts(self) -> tuple[SearchQuery, ...]:
        """Each prefix, whole word and phrase as a query of its own: a store may match some of
        them in its index and check the others on the rows found (their AND is this query)."""
        return (
            *(SearchQuery((word,), ()) for word in self.words),
            *(SearchQuery((), (), (word,)) for word in self.whole_words),
            *(SearchQuery((), (phrase,)) for phrase in self.phrases),
        )


def joined(parts: Sequence[SearchQuery]) -> SearchQuery:
    """The query that matches what all of `parts` match (the inverse of `SearchQuery.parts`)."""
    return SearchQuery(
        tuple(word for part in parts for word in part.words),
        tuple(phrase for part in parts for phrase in part.phrases),
        tuple(word for part in parts for word in part.whole_words),
    )


@dataclass(frozen=True)
class Ranked:
    """A memory in a ranked list, with its score (higher is better; comparable only within one
    list: each ranker has its own scale)."""

    memory: Memory
    score: float


class Scored(NamedTuple):
    """A memory of a ranked answer by id, with its score: what a ranker answers. A search reads
    the rows of the few it returns only once its page is cut (`domain/recall.py`)."""

    id: uuid.UUID
    score: float


class Ranker(Protocol):
    """Ranks the memories a query may return, best first."""

    def rank_memories(
        self, query: MemoryQuery, *, limit: int, pool: int | None = None
    ) -> Sequence[Scored]:
        """The ids of up to `limit` memories matching `query` (its audiences, filters and
        search), best first by `(score, id)`, with their scores; with `pool`, among the newest
        `pool` matches of each audience only."""
        ...


def words_of(text: str) -> list[str]:
    """The words of a text as the search index sees them: case-folded, accents removed, each
    cut to `MAX_WORD_BYTES`."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    bare = "".join(char for char in decomposed if not unicodedata.combining(char))
    return [word if len(word) <= _SHORT_WORD else _cut(word) for word in _WORD.findall(bare)]


def _cut(word: str) -> str:
    """`word`'s first `MAX_WORD_BYTES` bytes of UTF-8, whole characters only."""
    return word.encode()[:MAX_WORD_BYTES].decode(errors="ignore")


def index_text(content: str) -> str:
    """What the full-text index stores for a memory's content."""
    return " ".join(words_of(content))


def recut(indexed: str) -> str:
    """An `index_text` written before words were cut to `MAX_WORD_BYTES`, as `index_text` writes
    it now: each word cut (migration 0025 for stored rows, `mnemos import` for older files)."""
    if len(indexed) <= _SHORT_WORD:  # no word this short can be over the limit
        return indexed
    return " ".join(word if len(word) <= _SHORT_WORD else _cut(word) for word in indexed.split(" "))


def parse_search(text: str, max_chars: int, field: str = "content_query") -> SearchQuery:
    """Parse a `content_query`; refuse one that is too long or has nothing to search for."""
    if len(text) > max_chars:
        raise invalid_field(field, f"must be at most {max_chars} characters")
    words: list[str] = []
    phrases: list[tuple[str, ...]] = []
    # Even-numbered pieces stand outside quotes; an unclosed quote runs to the end.
    for index, piece in enumerate(text.split('"')):
        found = words_of(piece)
        if index % 2 == 0 or len(found) == 1:
            words.extend(found)
        elif found:
            phrases.append(tuple(found))
    query = _simplified(words, phrases)
    if query.terms == 0:
        raise invalid_field(field, "must contain at least one letter or digit")
    if query.terms > MAX_TERMS:
        raise invalid_field(field, f"must contain at most {MAX_TERMS} words")
    return query


def _simplified(words: list[str], phrases: list[tuple[str, ...]]) -> SearchQuery:
    """Distinct terms; short words whole; no prefix that a longer term of the query implies."""
    unique_phrases = tuple(dict.fromkeys(phrases))
    longer = [word for word in words if len(word) >= MIN_PREFIX_CHARS]
    longer += [word for phrase in unique_phrases for word in phrase]
    prefixes = [
        word
        for word in dict.fromkeys(words)
        if len(word) >= MIN_PREFIX_CHARS
        and not any(other != word and other.startswith(word) for other in longer)
    ]
    whole = [word for word in dict.fromkeys(words) if len(word) < MIN_PREFIX_CHARS]
    return SearchQuery(tuple(prefixes), unique_phrases, tuple(whole))


def relevance(indexed: str, search: SearchQuery) -> float:
    """How well a memory matches `search`, read from its indexed words (`index_text`) and the
    search alone: for each term (prefix, whole word or phrase, as the index matches it), its
    occurrences `n` give `n / (n + d)`, summed over the terms. `d` grows with the memory's own
    length in words, so that the same count in a longer memory weighs less; and each term's
    part saturates, so that holding every term beats repeating one. BM25 without its two
    statistics of the whole index (inverse document frequency, average length), which would
    let one tenant's memories move another's order (docs/decisions.md, "Keyword scores from the
    row alone"). 0 for a memory that holds no term."""
    return scorer(search)(indexed)


def scorer(search: SearchQuery) -> Callable[[str], float]:
    """`relevance` of `search`, its terms prepared once for many memories."""
    prefixes = tuple(" " + word for word in search.words)  # a prefix starts a word
    # A whole word or a phrase stands between spaces: counted in the text with each word
    # between its own two spaces (so that `tea tea` holds ` tea ` twice).
    spaced = tuple(" " + word + " " for word in search.whole_words)
    spaced += tuple(" " + "  ".join(phrase) + " " for phrase in search.phrases)
    base = SATURATION * (1 - LENGTH_WEIGHT)
    per_word = SATURATION * LENGTH_WEIGHT / TYPICAL_WORDS

    def score(indexed: str) -> float:
        damping = base + per_word * (indexed.count(" ") + 1)
        total = 0.0
        if prefixes:
            text = " " + indexed
            for needle in prefixes:
                count = text.count(needle)  # no overlap: a needle holds one space, first
                total += count / (count + damping)
        if spaced:
            text = " " + indexed.replace(" ", "  ") + " "
            for needle in spaced:
                count = _occurrences(text, needle)
                total += count / (count + damping)
        return total

    return score


def _occurrences(text: str, needle: str) -> int:
    """How many times `needle` starts in `text`, overlaps included (`a a` twice in `a a a`)."""
    count, at = 0, text.find(needle)
    while at >= 0:
        count += 1
        at = text.find(needle, at + 1)
    return count
