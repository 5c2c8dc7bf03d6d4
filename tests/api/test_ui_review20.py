"""The page's fixes after review20 beyond its strict xfails (tests/test_review20.py): the
sign-in form's 429 says when to retry, and the items review20 noticed without filing them
(docs/decisions.md, "review20's findings fixed")."""

from __future__ import annotations

from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.storage.base import Store
from tests.api.test_ui_http import sign_in


def test_a_sign_in_refused_for_too_many_failures_says_when_to_retry(
    settings: Settings, store: Store
) -> None:
    """Past the failed-authentication limit the sign-in form is shown again with 429 and the
    limiter's message; like every other 429, it says when to retry."""
    guarded = settings.model_copy(update={"auth_failures_per_minute": 2})
    with TestClient(create_app(guarded, store)) as browser:
        answers = [sign_in(browser, "mn_user_made_up") for _ in range(3)]
    assert [answer.status_code for answer in answers] == [401, 401, 429], answers
    refused = answers[-1]
    assert refused.headers["content-type"].startswith("text/html")
    assert 1 <= int(refused.headers.get("retry-after", "0")) <= 60, dict(refused.headers)
