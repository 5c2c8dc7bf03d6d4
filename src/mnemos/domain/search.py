"""Full-text queries: what a caller typed, reduced to words and phrases every backend can match.

Semantics (the same on every backend): words match in any order, case- and accent-insensitively;
each bare word matches as a prefix (`pref` finds "preferences"); text in double quotes is a phrase
whose words must stand next to each other in that order. Everything that is not a letter or a
digit separates words, so no operator syntax of the underlying engine can reach it.

Both the stored text and the query go through `words_of`, so every backend indexes exactly the
same words: storage indexes `index_text(content)`, never the raw content.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from mnemos.errors import invalid_field

_WORD = re.compile(r"[^\W_]+")
MAX_TERMS = 32


@dataclass(frozen=True)
class SearchQuery:
    """Prefix-matched words and exact phrases, all of which must match."""

    words: tuple[str, ...]
    phrases: tuple[tuple[str, ...], ...]

    @property
    def terms(self) -> int:
        return len(self.words) + sum(len(phrase) for phrase in self.phrases)


def words_of(text: str) -> list[str]:
    """The words of a text as the search index sees them: case-folded, accents removed."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    bare = "".join(char for char in decomposed if not unicodedata.combining(char))
    return _WORD.findall(bare)


def index_text(content: str) -> str:
    """What the full-text index stores for a memory's content."""
    return " ".join(words_of(content))


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
    query = SearchQuery(tuple(dict.fromkeys(words)), tuple(dict.fromkeys(phrases)))
    if query.terms == 0:
        raise invalid_field(field, "must contain at least one letter or digit")
    if query.terms > MAX_TERMS:
        raise invalid_field(field, f"must contain at most {MAX_TERMS} words")
    return query
