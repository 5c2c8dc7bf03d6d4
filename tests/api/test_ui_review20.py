"""The page's fixes after review20 beyond its strict xfails (tests/test_review20.py): the
sign-in form's 429 says when to retry, and the items review20 noticed without filing them
(docs/decisions.md, "review20's findings fixed")."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

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


# --- registering an agent: post, redirect, get -------------------------------------------------

KEY_SHOWN = re.compile(r'id="new-key"[^>]*>(mn_agent_[^<]+)<')


def test_reloading_the_page_after_registering_registers_no_other_agent(
    client: TestClient, world: World, store: Store
) -> None:
    """Registering answers 303 to My agents, which shows the key once: reloading that page
    (what a person does after copying the key) is a GET and registers nothing more. The key
    reaches the page in a cookie sealed for the session, sent to that page alone and dropped as
    it is shown: the key is never in the clear in a header, and no other session reads it."""
    ann = world.user("Ann", "Acme")
    csrf = signed_in(client, ann)
    sealed_copy = TestClient(client.app)  # Ann in another browser, with her own session
    signed_in(sealed_copy, ann)
    posted = client.post(
        "/ui/agents", data={"csrf_token": csrf, "name": "Scout"}, follow_redirects=False
    )
    assert posted.status_code == 303 and posted.headers["location"] == "/ui/agents"
    set_cookies = posted.headers.get_list("set-cookie")
    assert "mn_agent_" not in posted.text + "".join(set_cookies)
    (flash,) = [c for c in set_cookies if c.startswith("mnemos_new_agent=")]
    assert "path=/ui/agents" in flash.lower() and "httponly" in flash.lower(), flash
    sealed = flash.split(";")[0].split("=", 1)[1]
    sealed_copy.cookies.set("mnemos_new_agent", sealed, path="/ui/agents")
    assert not KEY_SHOWN.search(sealed_copy.get("/ui/agents").text)  # another session's
    shown = client.get("/ui/agents")
    key = KEY_SHOWN.search(shown.text)
    assert shown.status_code == 200 and key, shown.text
    assert client.get("/api/v1/agent/me", headers={"X-API-Key": key.group(1)}).is_success
    for _ in range(2):  # reloads
        again = client.get("/ui/agents")
        assert again.status_code == 200 and "Scout" in again.text
        assert key.group(1) not in again.text
    assert [agent.name for agent in store.agents_of(uuid.UUID(ann.id))] == ["Scout"]


# --- the page's assets and HEAD ----------------------------------------------------------------


def test_the_pages_assets_carry_the_pages_security_headers(client: TestClient) -> None:
    """`/ui/static/*` is served with `nosniff` and the page's other security headers (a file
    type a browser could guess otherwise, framing, a policy if opened as a document); unlike a
    page, a browser may keep it."""
    for asset in ("/ui/static/ui.css", "/ui/static/ui.js"):
        for answer in (client.get(asset), client.head(asset)):
            assert answer.status_code == 200, asset
            assert answer.headers["x-content-type-options"] == "nosniff", asset
            assert answer.headers["x-frame-options"] == "DENY", asset
            assert "default-src 'none'" in answer.headers["content-security-policy"], asset
            assert answer.headers.get("cache-control") != "no-store", asset


def test_head_on_a_page_answers_as_get_without_the_body(client: TestClient, world: World) -> None:
    """HEAD is GET without the body (RFC 9110): a page answers it with GET's status and
    headers, signed in or not, a redirect too, rather than 405 `Allow: GET`."""
    ann = world.user("Ann", "Acme")
    for path in ("/ui/signin", "/ui/", "/ui/me"):  # signed out: the form, then redirects
        got = client.get(path, follow_redirects=False)
        head = client.head(path, follow_redirects=False)
        assert (head.status_code, head.content) == (got.status_code, b""), path
        assert head.headers.get("location") == got.headers.get("location"), path
    signed_in(client, ann)
    for path in ("/ui/", "/ui/agents", "/ui/me", "/ui/me/erase", "/ui/me/export"):
        got = client.get(path)
        head = client.head(path)
        assert (head.status_code, head.content) == (got.status_code, b""), path
        assert head.headers["content-type"] == got.headers["content-type"], path
        assert head.headers["x-content-type-options"] == "nosniff", path
    assert client.head("/ui/no-such-page").status_code == 404


# --- docs/ui.md says what the page says --------------------------------------------------------

NOTICE = re.compile(r'<p class="notice" role="status">([^<]+)</p>')


def test_the_erasure_notice_is_the_one_docs_ui_md_quotes(client: TestClient, world: World) -> None:
    """After erasing, About me shows a fixed notice (no count since review10: a number in the
    link would be the link's); docs/ui.md quotes that notice rather than promising a count."""
    ann = world.user("Ann", "Acme")
    csrf = signed_in(client, ann)
    erased = client.post("/ui/me/erase", data={"csrf_token": csrf})
    assert erased.status_code == 200 and erased.history[0].status_code == 303
    notice = NOTICE.search(erased.text)
    assert notice, erased.text
    docs = (Path(__file__).resolve().parents[2] / "docs" / "ui.md").read_text()
    assert f'"{notice.group(1)}"' in docs, notice.group(1)
