"""The page's fixes after review20 beyond its strict xfails (tests/test_review20.py): the
sign-in form's 429 says when to retry, and the items review20 noticed without filing them
(docs/decisions.md, "review20's findings fixed")."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.storage.base import Store
from tests.api.test_ui_http import sign_in, signed_in
from tests.world import World, memory_body

AGENT_MEMORIES = "/api/v1/agent/memories"


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


# --- the confirm pages -------------------------------------------------------------------------

AUTOFOCUSED = re.compile(r"<(button|a|input)\b[^>]*\bautofocus\b[^>]*>([^<]*)<", re.S)


def test_no_confirm_page_starts_on_its_destructive_button(client: TestClient, world: World) -> None:
    """Each confirm page (erase everything about me, delete an agent, delete a memory) starts
    with the focus on Cancel: Enter on arrival (a key still held, a habit) never confirms what
    cannot be undone."""
    ann = world.user("Ann", "Acme")
    bot = world.agent(ann)
    about_ann = client.post(
        AGENT_MEMORIES, json=memory_body("Ann likes tea", subject_id=ann.id), headers=bot.headers
    )
    assert about_ann.status_code == 201, about_ann.text
    signed_in(client, ann)
    for path in (
        "/ui/me/erase",
        f"/ui/agents/{bot.id}/delete",
        f"/ui/memories/{about_ann.json()['data']['id']}/delete",
    ):
        html = client.get(path).text
        assert 'class="danger"' in html, html
        focused = AUTOFOCUSED.findall(html)
        assert [(tag, label.strip()) for tag, label in focused] == [("a", "Cancel")], path
