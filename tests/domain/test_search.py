import uuid

import pytest

from mnemos.domain.models import Scope
from mnemos.domain.queries import Audience
from mnemos.domain.search import MAX_TERMS, parse_search, words_of
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


def test_bare_words_and_quoted_phrases() -> None:
    query = parse_search('prefers "green tea" morning', 500)
    assert query.words == ("prefers", "morning")
    assert query.phrases == (("green", "tea"),)


def test_unclosed_quote_runs_to_the_end_and_one_word_phrase_is_a_word() -> None:
    query = parse_search('"tea" "hot green', 500)
    assert query.words == ("tea",)
    assert query.phrases == (("hot", "green"),)


def test_operators_of_every_engine_are_only_separators() -> None:
    query = parse_search("NEAR(a b) OR x* AND -y ^z col:w & !v | (u) <-> t:*", 500)
    assert set(query.words) >= {"near", "or", "and", "x", "y", "z", "col", "w", "v", "u", "t"}
    assert all(word.isalnum() for word in query.words)


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
    assert fts5_query(query) == '{search_text} : ("and"* "or"* "not this")'
    assert tsquery(query) == "and:* & or:* & (not <-> this)"


def test_sqlite_search_adds_the_narrowest_scope_token() -> None:
    agent, org = uuid.uuid4(), uuid.uuid4()
    query = parse_search("harbor", 500)
    narrowest = fts5_query(query, Audience(source_agent_id=agent, organization_id=org))
    assert narrowest == f'{{search_text}} : ("harbor"*) AND {{scope}} : "zzag{agent.hex}"'
    org_wide = fts5_query(query, Audience(organization_id=org, scopes=(Scope.ORGANIZATION,)))
    assert org_wide.endswith(f'{{scope}} : "zzorg{org.hex}"')
    # A branch with no owner column to name (room membership) searches the words alone.
    assert "{scope}" not in fts5_query(query, Audience(room_member_user_id=agent))
