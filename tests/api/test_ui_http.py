"""The web page (`/ui/`) over HTTP, on every backend: sign-in, the session cookie, CSRF, what
pages may contain, and that every refusal is the server's (the browser run is
tests/live/test_ui_browser.py)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import jwt
import pytest
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain.accounts import issue_token, revoke_tokens
from mnemos.domain.ids import utcnow
from mnemos.domain.sessions import SessionSigner
from mnemos.storage.base import Store
from tests.api.test_band_agent import store as remember
from tests.api.test_band_human import cast  # noqa: F401  (fixture)
from tests.api.test_tokens import AUDIENCE, ISSUER, idp  # noqa: F401  (fixture)
from tests.world import Actor, World

ME = "/api/v1/me/memories"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found, html
    return found.group(1)


def sign_in(client: TestClient, credential: str) -> Any:
    form = client.get("/ui/signin")
    assert form.status_code == 200, form.text
    return client.post(
        "/ui/signin",
        data={"csrf_token": csrf_of(form.text), "credential": credential},
        follow_redirects=False,
    )


def signed_in(client: TestClient, person: Actor, lands: str = "/ui/") -> str:
    """Sign `person` in (landing on `lands`: About me without the plan); the CSRF token of
    their session."""
    done = sign_in(client, person.api_key)
    assert done.status_code == 303 and done.headers["location"] == lands, done.text
    return csrf_of(client.get("/ui/agents").text)


def cookie_header(response: Any) -> str:
    values: list[str] = response.headers.get_list("set-cookie")
    sessions = [v for v in values if v.startswith("mnemos_session=")]
    assert len(sessions) == 1, values
    return sessions[0]


def error_message(response: Any) -> str:
    found = re.search(r'id="error-message">([^<]*)<', response.text)
    assert found, response.text
    return found.group(1)


def test_session_cookie_flags_and_contents(client: TestClient, world: World) -> None:
    ann = world.user("Ann", "acme")
    done = sign_in(client, ann.api_key)
    assert done.status_code == 303
    header = cookie_header(done)
    flags = [part.strip().lower() for part in header.split(";")[1:]]
    assert "httponly" in flags and "samesite=strict" in flags and "path=/ui" in flags
    assert "secure" not in flags  # plain HTTP here; see the HTTPS test
    assert not any(flag.startswith(("max-age", "expires")) for flag in flags)
    value = header.split(";")[0].split("=", 1)[1]
    assert ann.api_key not in header and ann.api_key[len("mn_user_") :] not in value
    claims = jwt.decode(value, options={"verify_signature": False})
    assert claims["sub"] == ann.id and claims["aud"] == "mnemos-ui"
    assert claims["exp"] - claims["iat"] == pytest.approx(1800, abs=1)  # MNEMOS_UI_SESSION_SECONDS
    assert set(claims) == {"iss", "aud", "iat", "exp", "csrf", "sub", "jti"}
    # a session is not a credential of the API
    api = client.get(ME, headers={"Authorization": f"Bearer {value}"})
    assert api.status_code == 401


def test_secure_cookie_over_https_and_when_configured(
    settings: Settings, store: Store, world: World
) -> None:
    ann = world.user("Ann", "acme")
    with TestClient(create_app(settings, store), base_url="https://testserver") as client:
        assert "secure" in cookie_header(sign_in(client, ann.api_key)).lower().split("; ")
    forced = settings.model_copy(update={"ui_secure_cookie": True})
    with TestClient(create_app(forced, store)) as client:
        # the sign-in form's own cookie is Secure too (a plain-HTTP client then cannot keep it)
        assert "secure" in cookie_header(client.get("/ui/signin")).lower().split("; ")


def test_sign_in_with_tokens_and_refusals(
    settings: Settings,
    store: Store,
    world: World,
    idp: dict[str, Any],  # noqa: F811
) -> None:
    ann = world.user("Ann", "acme")
    bot = world.agent(ann, "Ann Bot")
    configured = settings.model_copy(
        update={"jwt_issuer": ISSUER, "jwt_audience": AUDIENCE, "jwks_file": idp["path"]}
    )
    now = int(time.time())
    external = jwt.encode(
        {"sub": ann.id, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 60},
        idp["key"],
        algorithm="RS256",
        headers={"kid": "k1"},
    )
    own = issue_token(store, uuid.UUID(ann.id), 60)
    for token in (own, external):
        with TestClient(create_app(configured, store)) as client:
            assert sign_in(client, token).status_code == 303
            assert "Ann" in client.get("/ui/").text
    with TestClient(create_app(configured, store)) as client:
        refused = sign_in(client, bot.api_key)
        assert refused.status_code == 401 and "agent&#39;s key" in refused.text
        assert client.get("/ui/", follow_redirects=False).status_code == 303  # not signed in
        for bad in ("mn_user_nope", own[:-4] + "AAAA", "x"):
            answer = sign_in(client, bad)
            assert answer.status_code == 401 and 'role="alert"' in answer.text, bad
        form = client.get("/ui/signin")
        forged = client.post(
            "/ui/signin", data={"credential": ann.api_key}, follow_redirects=False
        )  # no CSRF token: the form is shown again, nobody is signed in
        assert forged.status_code == 403 and "expired" in forged.text
        assert client.get("/ui/", follow_redirects=False).status_code == 303
        assert form.status_code == 200


def test_csrf_is_required_on_every_state_changing_request(
    client: TestClient, world: World, settings: Settings, store: Store
) -> None:
    ann = world.user("Ann", "acme")
    bot = world.agent(ann, "Ann Bot")
    memory = remember(client, bot, "ann likes tea", subject_id=ann.id)
    token = signed_in(client, ann)
    mid = memory["id"]
    posts = {
        f"/ui/memories/{mid}/archive": {},
        f"/ui/memories/{mid}/supersede": {},
        f"/ui/memories/{mid}/restore": {},
        f"/ui/memories/{mid}/delete": {},
        f"/ui/agents/{bot.id}/delete": {},
        "/ui/agents": {"name": "Forged"},
        "/ui/me/erase": {},
        "/ui/signout": {},
    }
    with TestClient(create_app(settings, store)) as other:
        other_token = signed_in(other, world.user("Bob", "acme"))
    for path, fields in posts.items():
        for sent in (None, "", "x" * 43, other_token, token.upper()):
            body = {**fields, **({"csrf_token": sent} if sent is not None else {})}
            answer = client.post(path, data=body, follow_redirects=False)
            assert answer.status_code == 403, (path, sent, answer.text)
            assert "csrf_refused" in answer.text
    # nothing changed: the memory, the agent, the session
    api = client.get(f"{ME}/{mid}", headers=ann.headers).json()["data"]
    assert api["status"] == "active"
    assert [a["id"] for a in client.get("/api/v1/me/agents", headers=ann.headers).json()["data"]]
    assert client.get("/ui/").status_code == 200
    # a JSON body (or any other kind) is not a form
    answer = client.post(
        f"/ui/memories/{mid}/archive", json={"csrf_token": token}, follow_redirects=False
    )
    assert answer.status_code == 422
    # and with the token, it works
    done = client.post(
        f"/ui/memories/{mid}/archive", data={"csrf_token": token}, follow_redirects=False
    )
    assert done.status_code == 303
    assert client.get(f"{ME}/{mid}", headers=ann.headers).json()["data"]["status"] == "archived"


def use_session(client: TestClient, token: str) -> None:
    client.cookies.clear()
    client.cookies.set("mnemos_session", token, path="/ui")


def test_expired_and_revoked_sessions(client: TestClient, world: World, store: Store) -> None:
    ann = world.user("Ann", "acme")
    signer = SessionSigner(store, 1800)
    stale, old = signer.issue(uuid.UUID(ann.id), now=utcnow() - timedelta(seconds=1801))
    use_session(client, stale)
    answer = client.get("/ui/agents", follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/signin?reason=expired"
    assert "Your session has expired" in client.get(answer.headers["location"]).text
    use_session(client, stale)
    forged = client.post(
        "/ui/agents", data={"csrf_token": old.csrf, "name": "x"}, follow_redirects=False
    )
    assert forged.headers["location"] == "/ui/signin?reason=expired"
    assert client.get("/api/v1/me/agents", headers=ann.headers).json()["data"] == []
    fresh, _ = signer.issue(uuid.UUID(ann.id))
    use_session(client, fresh)
    assert client.get("/ui/agents").status_code == 200
    # revoking one's tokens ends every session issued before
    revoke_tokens(store, uuid.UUID(ann.id))
    answer = client.get("/ui/", follow_redirects=False)
    assert answer.headers["location"] == "/ui/signin?reason=expired"
    # ... and the sign-in page shows its form (it once sent an ended session back home: a loop)
    assert "Your session has expired" in client.get(answer.headers["location"]).text
    # a session signed with another secret is nobody's
    other, _ = SessionSigner(store, 1800).issue(uuid.UUID(ann.id))
    use_session(client, other[:-3] + "abc")
    assert client.get("/ui/", follow_redirects=False).headers["location"].endswith("=signin")


def test_sign_out_ends_the_session_even_for_a_copy_of_its_cookie(
    client: TestClient, world: World, store: Store
) -> None:
    ann = world.user("Ann", "acme")
    csrf = signed_in(client, ann)
    copied = client.cookies.get("mnemos_session", path="/ui")
    assert copied
    other = TestClient(client.app)  # another browser holding a copy of the same cookie
    use_session(other, copied)
    assert other.get("/ui/agents").status_code == 200
    done = client.post("/ui/signout", data={"csrf_token": csrf}, follow_redirects=False)
    assert done.headers["location"] == "/ui/signin?reason=signed_out"
    # the copy opens nothing any more, in this process or any other on the same database
    use_session(other, copied)
    assert other.get("/ui/agents", follow_redirects=False).headers["location"].endswith("=signin")
    forged = other.post(
        "/ui/agents", data={"csrf_token": csrf, "name": "x"}, follow_redirects=False
    )
    assert forged.status_code == 303 and forged.headers["location"].endswith("=signin")
    assert client.get("/api/v1/me/agents", headers=ann.headers).json()["data"] == []
    assert SessionSigner(store, 1800).store.session_ended(
        jwt.decode(copied, options={"verify_signature": False})["jti"]
    )
    # signing in again gives a new session that works
    signed_in(client, ann)
    assert client.get("/ui/agents").status_code == 200


def pages(client: TestClient, memory_ids: list[str]) -> Iterator[tuple[str, Any]]:
    paths = ["/ui/", "/ui/?status=all", "/ui/?q=tea", "/ui/agents", "/ui/me", "/ui/me/erase"]
    paths += [f"/ui/memories/{mid}/delete" for mid in memory_ids]
    paths += ["/ui/signin", "/ui/nope", f"/ui/memories/{uuid.uuid4()}/delete"]
    for path in paths:
        yield path, client.get(path)


def test_no_page_embeds_a_key_or_anything_from_elsewhere(
    client: TestClient, world: World, store: Store
) -> None:
    ann = world.user("Ann", "acme")
    bot = world.agent(ann, "Ann Bot")
    mids = [remember(client, bot, f"ann likes tea {i}", subject_id=ann.id)["id"] for i in range(3)]
    token = signed_in(client, ann)
    registered = client.post("/ui/agents", data={"csrf_token": token, "name": "Scout"})
    assert registered.status_code == 200 and registered.history[0].status_code == 303
    new_key = re.search(r'id="new-key"[^>]*>(mn_agent_[^<]+)<', registered.text)
    assert new_key, registered.text
    assert client.get("/api/v1/agent/me", headers={"X-API-Key": new_key.group(1)}).is_success
    token_of_ann = issue_token(store, uuid.UUID(ann.id), 60)
    secrets = [ann.api_key, bot.api_key, new_key.group(1), token_of_ann]
    for path, answer in pages(client, mids):
        for secret in secrets:
            assert secret not in answer.text, path
        assert "mn_user_" not in answer.text.replace("mn_user_…", ""), path
        if answer.headers.get("content-type", "").startswith("text/html"):
            assert "frame-ancestors 'none'" in answer.headers["content-security-policy"], path
            assert answer.headers["cache-control"] == "no-store", path
            for url in re.findall(r'(?:src|href|action)="([^"]*)"', answer.text):
                assert url.startswith(("/ui/", "#")), (path, url)
    for asset in ("/ui/static/ui.css", "/ui/static/ui.js"):
        served = client.get(asset)
        assert served.status_code == 200
        assert not re.search(r"https?:|@import|url\(", served.text), asset


def test_buttons_shown_exactly_where_the_api_allows(
    client: TestClient,
    cast: dict[str, Any],  # noqa: F811
) -> None:
    for name in ("ann", "bob", "eve"):
        person: Actor = cast[name]
        with TestClient(client.app) as browser:
            signed_in(browser, person)
            html = browser.get("/ui/?status=all").text
        cards = re.findall(r'<li class="memory card" id="m-([0-9a-f-]+)".*?</li>', html, re.S)
        api = client.get(ME, params={"status": "all", "limit": 100}, headers=person.headers)
        assert sorted(cards) == sorted(row["id"] for row in api.json()["data"])
        for mid in cards:
            card = re.search(rf'id="m-{mid}".*?</li>', html, re.S)
            assert card
            shown = "Delete</button>" in card.group(0)
            # the API's answer to a change that leaves the memory as it is: 403 or allowed
            allowed = client.get(f"{ME}/{mid}", headers=person.headers).status_code == 200 and (
                client.post(f"{ME}/{mid}/restore", headers=person.headers).status_code != 403
            )
            assert shown == allowed, (name, mid)


def test_refused_changes_and_a_safe_way_back(client: TestClient, world: World) -> None:
    ann, eve = world.user("Ann", "acme"), world.user("Eve", "globex")
    bob = world.user("Bob", "acme")
    bot = world.agent(bob, "Bob Bot")
    about_ann = remember(client, bot, "about ann", subject_id=ann.id)["id"]
    shared = remember(client, bot, "acme memo", scope="organization")["id"]
    token = signed_in(client, eve)
    for mid, status in ((about_ann, 403), (str(uuid.uuid4()), 404), ("not-a-uuid", 404)):
        for action in ("archive", "supersede", "restore", "delete"):
            answer = client.post(f"/ui/memories/{mid}/{action}", data={"csrf_token": token})
            assert answer.status_code == status, (mid, action, answer.text)
            assert 'role="alert"' in answer.text
        assert client.get(f"/ui/memories/{mid}/delete").status_code == status
    with TestClient(client.app) as ann_browser:
        ann_token = signed_in(ann_browser, ann)
        answer = ann_browser.post(f"/ui/memories/{shared}/archive", data={"csrf_token": ann_token})
        assert answer.status_code == 403 and "Only memories about you" in error_message(answer)
        assert ann_browser.get(f"/ui/memories/{shared}/delete").status_code == 403
        for back in ("https://evil.test/", "//evil.test/", "/ui/\\evil", "/api/v1/me/profile"):
            done = ann_browser.post(
                f"/ui/memories/{about_ann}/archive",
                data={"csrf_token": ann_token, "back": back},
                follow_redirects=False,
            )
            assert done.headers["location"] == "/ui/?done=archived", back
            ann_browser.post(f"/ui/memories/{about_ann}/restore", data={"csrf_token": ann_token})
    for mid in (about_ann, shared):
        row = client.get(f"{ME}/{mid}", headers=bob.headers if mid == shared else ann.headers)
        assert row.json()["data"]["status"] == "active"
    assert client.get("/ui/?scope=nope").status_code == 422
    assert client.get("/ui/?cursor=forged").status_code == 422


def test_plan_off_is_a_clear_page(client: TestClient, world: World, store: Store) -> None:
    ann = world.user("Ann", "acme")
    store.set_memory_enabled("user", uuid.UUID(ann.id), False)
    signed_in(client, ann, lands="/ui/me")
    answer = client.get("/ui/")
    assert answer.status_code == 403 and "plan_required" in answer.text
    assert client.get("/ui/me").status_code == 200  # rights do not need the plan


def test_filters_are_the_api_filters_and_stay_chosen(
    client: TestClient,
    cast: dict[str, Any],  # noqa: F811
) -> None:
    ann, bob_bot, shared = cast["ann"], cast["b1"], cast["room"]
    signed_in(client, ann)
    for params, api in (
        ({"agent": bob_bot.id}, {"source_agent_id": bob_bot.id}),
        ({"agent": str(uuid.uuid4())}, {"source_agent_id": None}),
        ({"room": shared, "scope": "room"}, {"chat_room_id": shared, "scope": "room"}),
        ({"segment": "tool", "status": "all"}, {"segment": "tool", "status": "all"}),
    ):
        html = client.get("/ui/", params=params).text
        shown = re.findall(r'<li class="memory card" id="m-([0-9a-f-]+)"', html)
        if api.get("source_agent_id") is None and "source_agent_id" in api:
            expected: list[str] = []
        else:
            answer = client.get(ME, params=api, headers=ann.headers)
            expected = [row["id"] for row in answer.json()["data"]]
        assert shown == expected, params
        for name, value in params.items():
            assert re.search(rf'<option value="{value}"\s+selected>', html), (name, html)


def test_a_path_or_method_no_page_serves_is_a_page_with_its_headers(client: TestClient) -> None:
    """Under /ui a 404 or 405 is a page with the page's security headers (the API's JSON
    elsewhere): the status, code and `Allow` are the API's."""
    missing = client.get("/ui/no-such-page")
    assert missing.status_code == 404 and missing.headers["content-type"].startswith("text/html")
    assert "frame-ancestors 'none'" in missing.headers["content-security-policy"]
    assert missing.headers["x-frame-options"] == "DENY" and "not_found" in missing.text
    asset = client.get("/ui/static/no-such-file.css")
    assert asset.status_code == 404 and "x-frame-options" in asset.headers
    wrong = client.delete("/ui/signin")
    assert wrong.status_code == 405 and "allow" in wrong.headers
    assert wrong.headers["x-content-type-options"] == "nosniff"
    api = client.get("/api/v1/no-such-route")
    assert api.status_code == 404 and api.json()["error"]["code"] == "not_found"
