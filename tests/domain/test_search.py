import uuid

import pytest

from mnemos.domain.models import Scope
from mnemos.domain.queries import Audience
from mnemos.domain.search import (
    MAX_TERMS,
    MAX_WORD_BYTES,
    MIN_PREFIX_CHARS,
    index_text,
    parse_search,
    relevance,
    words_of,
)
from mnemos.errors import ValidationFailed
from mnemos.storage.postgres import tsquery
from mnemos.storage.sqlite import fts5_query


def test_words_are_lowercased_and_split_on_anything_not_alphanumeric() -> None:
    assert words_of("Prefers SUV's, snake_case & e-mail!") == [
        "prefers",
        "suv",
        "s",
        "snake",
        "case",
        "e",
        "mail",
    ]


def test_a_word_is_cut_to_the_longest_every_backend_indexes_on_a_character() -> None:
    assert words_of("ab " + "x" * 3_000) == ["ab", "x" * MAX_WORD_BYTES]
    (cut,) = words_of("中" * 700)  # 3 bytes each: 682 whole characters fit
    assert cut == "中" * (MAX_WORD_BYTES // 3)
    assert parse_search("中" * 700, 1_000).words == (cut,)  # the query's words alike


def test_bare_words_and_quoted_phrases() -> None:
    query = parse_search('prefers "green tea" morning', 500)
    assert query.words == ("prefers", "morning")
    assert query.phrases == (("green", "tea"),)


def test_unclosed_quote_runs_to_the_end_and_one_word_phrase_is_a_word() -> None:
    query = parse_search('"tea" "hot green', 500)
    assert query.words == ("tea",)
    assert query.phrases == (("hot", "green"),)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("NEAR(a b) OR x* AND -y", {"near", "a", "b", "or", "x", "and", "y"}),
        ("^z col:w & !v | (u) <-> t:*", {"z", "col", "w", "v", "u", "t"}),
    ],
)
def test_operators_of_every_engine_are_only_separators(text: str, expected: set[str]) -> None:
    query = parse_search(text, 500)
    assert set(query.words) | set(query.whole_words) == expected
    assert all(word.isalnum() for word in query.words + query.whole_words)


@pytest.mark.parametrize("text", ["", "   ", "***", '"" ()', "&|!<->:*"])
def test_nothing_to_search_for_is_refused(text: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_search(text, 500)
    assert caught.value.details == {"content_query": "must contain at least one letter or digit"}


def test_too_long_and_too_many_terms_are_refused() -> None:
    with pytest.raises(ValidationFailed):
        parse_search("a" * 501, 500)
    with pytest.raises(ValidationFailed):
        parse_search(" ".join(f"w{i}" for i in range(MAX_TERMS + 1)), 10_000)


def test_backend_expressions_quote_every_term() -> None:
    query = parse_search('and "not this" or', 500)
    # "or" is shorter than MIN_PREFIX_CHARS: a whole word, not a prefix.
    assert fts5_query(query) == '{search_text} : ("and"* "or" "not this")'
    assert tsquery(query) == "and:* & or & (not <-> this)"


def test_sqlite_search_adds_the_narrowest_scope_token() -> None:
    agent, org = uuid.uuid4(), uuid.uuid4()
    query = parse_search("harbor", 500)
    narrowest = fts5_query(
        query, Audience(source_agent_id=agent, organization_id=org, tenant_id=org)
    )
    assert narrowest == f'{{search_text}} : ("harbor"*) AND {{scope}} : "zzag{agent.hex}"'
    org_wide = fts5_query(
        query, Audience(organization_id=org, scopes=(Scope.ORGANIZATION,), tenant_id=org)
    )
    assert org_wide.endswith(f'{{scope}} : "zzorg{org.hex}"')
    # A branch with no owner column to name (room membership) searches the words alone.
    assert "{scope}" not in fts5_query(query, Audience(room_member_user_id=agent, tenant_id=org))


def test_adversarial_queries_are_bounded() -> None:
    """Issue 11, finding 4: one-letter prefixes and many terms made a search cost seconds."""
    assert MAX_TERMS <= 8
    assert MIN_PREFIX_CHARS >= 3
    query = parse_search("b a", 500)
    assert query.words == ()  # nothing is matched as a prefix
    assert query.whole_words == ("b", "a")
    with pytest.raises(ValidationFailed):
        parse_search(" ".join("abcdefghijklmnopqrstuvwxyz012345"), 500)
    # Repeats are one term, a prefix that a longer word implies is no term at all.
    query = parse_search("harbor har harb HARBOR " * 20, 500)
    assert query.words == ("harbor",)
    query = parse_search('gre "green tea" te', 500)
    assert (query.words, query.phrases, query.whole_words) == ((), (("green", "tea"),), ("te",))


@pytest.mark.parametrize("text", ["b a", " ".join("abcdefgh"), "ab cd ef gh", "x y z 1 2 3 4 5"])
def test_no_prefix_shorter_than_the_minimum_reaches_a_backend(text: str) -> None:
    query = parse_search(text, 500)
    assert all(len(word) >= MIN_PREFIX_CHARS for word in query.words)
    assert "*" not in fts5_query(query)
    assert ":*" not in tsquery(query)


def score(content: str, search: str) -> float:
    return relevance(index_text(content), parse_search(search, 500))


def test_relevance_counts_each_term_as_the_index_matches_it() -> None:
    assert score("teapot and tea", "tea") > score("teapot and cake", "tea") > 0  # prefixes
    assert score("steam", "tea") == 0  # a prefix starts a word
    assert score("e e-mail", "e") > score("e mail", "e") > 0  # whole short words, "e e" twice
    assert score("eel", "e") == 0
    assert score("a a a", '"a a"') > score("a a b", '"a a"') > 0  # a phrase, overlaps too
    assert score("green and tea", '"green tea"') == 0


def test_relevance_saturates_and_weighs_length() -> None:
    assert score("tea tea tea cake", "tea") > score("tea cake cake cake", "tea")
    assert score("tea cake", "tea") > score("tea cake and more words", "tea")
    # each term counts: twice each beats three times one and once the other
    assert score("tea cake tea cake", "tea cake") > score("tea tea tea cake", "tea cake")
