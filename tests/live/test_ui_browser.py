"""The web page in a real browser (Playwright driving the system's Chromium) against a real
`mnemos serve`, on every backend. What the page shows and does is checked against the Band
human API's answers for the same person.

Screenshots of each page are written to `$MNEMOS_UI_SCREENSHOTS` (docs/ui.md:
`MNEMOS_UI_SCREENSHOTS=docs/ui ./scripts/test tests/live/test_ui_browser.py`), else to a
temporary folder; on the SQLite run only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    Locator,
    Page,
    Playwright,
    expect,
    sync_playwright,
)

from mnemos.config import Settings
from mnemos.domain.ids import utcnow
from mnemos.domain.sessions import SessionSigner
from mnemos.storage import open_store
from mnemos.storage.base import Store
from tests.api.test_band_agent import store as remember
from tests.api.test_band_human import room
from tests.live.conftest import LiveServer
from tests.world import Actor, World

pytestmark = pytest.mark.live

ME = "/api/v1/me/memories"
PHONE = {"width": 375, "height": 800}


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("Chromium is not installed: run ./scripts/test (it installs Debian's chromium)")
    return found


# One browser for the whole run of this module (both backends). Module scope, not session: the
# sync driver keeps an event loop of its own, closed before any other module runs.
@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    args = ["--no-sandbox"] if os.geteuid() == 0 else []  # Chromium refuses root without it
    launched = playwright.chromium.launch(executable_path=chromium(), args=args)
    yield launched
    launched.close()


@pytest.fixture(scope="module")
def site(live: LiveServer) -> Iterator[Site]:
    opened = open_store(Settings(database_url=live.env["MNEMOS_DATABASE_URL"]))
    with httpx.Client(base_url=live.base_url, timeout=30) as api:
        yield Site(live, opened, World(opened), api)
    opened.close()


class Site:
    """The live server, its database (to make people) and an API client."""

    def __init__(self, live: LiveServer, store: Store, world: World, api: httpx.Client):
        self.live, self.store, self.world, self.api = live, store, world, api
        self.url = live.base_url
        self.sqlite = live.env["MNEMOS_DATABASE_URL"].startswith("sqlite")

    def api_ids(self, person: Actor, **params: Any) -> list[str]:
        """Every id the Band human API lists for `person`, newest first, through its cursor."""
        ids: list[str] = []
        cursor = None
        while True:
            query = {**params, "limit": 100, **({"cursor": cursor} if cursor else {})}
            answer = self.api.get(ME, params=query, headers=person.headers)
            assert answer.status_code == 200, answer.text
            ids += [row["id"] for row in answer.json()["data"]]
            cursor = answer.json()["meta"]["next_cursor"]
            if cursor is None:
                return ids

    def status(self, person: Actor, memory_id: str) -> Any:
        answer = self.api.get(f"{ME}/{memory_id}", headers=person.headers)
        return answer.json()["data"]["status"] if answer.status_code == 200 else answer.status_code


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    opened = browser.new_context(viewport=PHONE)
    yield opened
    opened.close()


@pytest.fixture
def page(context: BrowserContext) -> Page:
    return context.new_page()


def shot(site: Site, page: Page, name: str, tmp_path: Path) -> None:
    if not site.sqlite:
        return
    folder = Path(os.environ.get("MNEMOS_UI_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def sign_in(page: Page, site: Site, credential: str) -> None:
    page.goto(f"{site.url}/ui/signin")
    page.get_by_label("API key").fill(credential)
    click(page.get_by_role("button", name="Sign in"))


def click(target: Locator) -> None:
    """Click something that loads a page, and wait for it."""
    with target.page.expect_navigation():
        target.click()


def press(page: Page, key: str) -> None:
    """Press a key that submits a form, and wait for the page it loads."""
    with page.expect_navigation():
        page.keyboard.press(key)


def shown_ids(page: Page) -> list[str]:
    ids: list[str] = page.locator("li.memory").evaluate_all("els => els.map(e => e.dataset.id)")
    return ids


def all_pages(page: Page) -> list[str]:
    """The ids of this list and of every next page."""
    ids = shown_ids(page)
    while page.get_by_role("link", name="Next page").count():
        click(page.get_by_role("link", name="Next page"))
        ids += shown_ids(page)
    return ids


def fits_the_phone(page: Page) -> bool:
    width: int = page.evaluate("document.documentElement.scrollWidth")
    return width <= PHONE["width"]


def test_sign_in_and_out_with_the_keyboard(page: Page, site: Site, tmp_path: Path) -> None:
    ann = site.world.user("Ann", "acme")
    bot = site.world.agent(ann, "Ann Bot")
    page.goto(f"{site.url}/ui/")
    assert page.url.endswith("/ui/signin?reason=signin")
    shot(site, page, "signin", tmp_path)
    # an agent's key is refused, with a message
    page.get_by_label("API key").fill(bot.api_key)
    press(page, "Enter")
    assert "agent's key" in page.locator("#signin-message").inner_text()
    assert page.url.endswith("/ui/signin")
    # the person's key, typed and sent without a mouse
    page.get_by_label("API key").focus()
    page.keyboard.type(ann.api_key)
    page.keyboard.press("Tab")
    focused = page.evaluate("document.activeElement.textContent")
    assert focused == "Sign in"
    press(page, "Enter")
    assert page.url == f"{site.url}/ui/"
    assert "Agents remember nothing you can see yet." in page.locator("#empty").inner_text()
    cookie = next(c for c in page.context.cookies() if c["name"] == "mnemos_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
    assert ann.api_key not in cookie["value"] and ann.api_key not in page.content()
    assert page.evaluate("document.cookie") == ""  # HttpOnly: no script can read the session
    assert fits_the_phone(page)
    click(page.get_by_role("button", name="Sign out"))
    assert "You have signed out." in page.content()
    page.goto(f"{site.url}/ui/agents")
    assert page.url.endswith("/ui/signin?reason=signin")


@pytest.fixture(scope="module")
def cast(site: Site) -> dict[str, Any]:
    """Three people in two organizations, their agents, a room and memories of every kind."""
    world, api = site.world, site.api
    ann, bob = world.user("Ann", "acme"), world.user("Bob", "acme")
    eve = world.user("Eve", "globex")
    a1, b1, e1 = (
        world.agent(ann, "Ann Bot"),
        world.agent(bob, "Bob Bot"),
        world.agent(eve, "Eve Bot"),
    )
    shared = room(api, a1, ann, b1, title="Shared")
    made = [
        (b1, "about ann by bob's bot", {"subject_id": ann.id}),
        (e1, "about ann by eve's bot", {"subject_id": ann.id}),
        (b1, "acme org", {"scope": "organization"}),
        (e1, "globex org", {"scope": "organization"}),
        (a1, "ann bot private", {}),
        (b1, "bob bot private", {}),
        (b1, "room subject about bob", {"subject_id": bob.id, "chat_room_id": shared}),
        (b1, "room private of bob bot", {"chat_room_id": shared}),
        (a1, "room private of ann bot", {"chat_room_id": shared}),
        (e1, "about eve", {"subject_id": eve.id, "segment": "tool"}),
    ]
    ids = {text: remember(api, who, text, **extra)["id"] for who, text, extra in made}
    return {"ann": ann, "bob": bob, "eve": eve, "room": shared, "ids": ids}


@pytest.mark.parametrize("name", ["ann", "bob", "eve"])
def test_each_person_sees_what_the_api_lists(
    page: Page, site: Site, cast: dict[str, Any], name: str, tmp_path: Path
) -> None:
    person: Actor = cast[name]
    sign_in(page, site, person.api_key)
    assert shown_ids(page) == site.api_ids(person)
    if name == "ann":
        shot(site, page, "memories", tmp_path)
        by_bob = cast["ids"]["about ann by bob's bot"]
        card = page.locator(f"#m-{by_bob}")
        assert "Bob Bot" in card.inner_text() and "Ann" in card.inner_text()
    for scope in ("about_me", "organization", "room", "all"):
        page.get_by_label("Show").select_option(scope)
        page.get_by_label("Status").select_option("all")
        click(page.get_by_role("button", name="Apply"))
        assert shown_ids(page) == site.api_ids(person, scope=scope, status="all"), scope
    page.goto(f"{site.url}/ui/?segment=tool&status=all")
    assert shown_ids(page) == site.api_ids(person, segment="tool", status="all")
    page.goto(f"{site.url}/ui/?room={cast['room']}&scope=room")
    assert shown_ids(page) == site.api_ids(person, chat_room_id=cast["room"], scope="room")
    if not shown_ids(page):
        assert "No memories match these filters." in page.locator("#empty").inner_text()
    assert fits_the_phone(page)


def test_changes_and_their_effect_through_the_api(page: Page, site: Site, tmp_path: Path) -> None:
    ann, bob = site.world.user("Ann", "acme"), site.world.user("Bob", "acme")
    bot = site.world.agent(bob, "Bob Bot")
    mine = remember(site.api, bot, "ann takes the aisle seat", subject_id=ann.id)["id"]
    org = remember(site.api, bot, "acme closes on fridays", scope="organization")["id"]
    sign_in(page, site, ann.api_key)
    card, other = page.locator(f"#m-{mine}"), page.locator(f"#m-{org}")
    assert other.get_by_role("button").count() == 0  # not Ann's to change
    assert [b.inner_text() for b in card.get_by_role("button").all()] == [
        "Archive",
        "Supersede",
        "Delete",
    ]
    click(card.get_by_role("button", name="Archive"))
    assert "Memory archived." in page.locator(".notice").inner_text()
    assert site.status(ann, mine) == "archived"
    page.get_by_label("Status").select_option("archived")
    click(page.get_by_role("button", name="Apply"))
    click(page.locator(f"#m-{mine}").get_by_role("button", name="Restore"))
    assert "Memory restored." in page.content() and site.status(ann, mine) == "active"
    assert "status=archived" in page.url  # back to the list the person was on
    page.goto(f"{site.url}/ui/")
    click(page.locator(f"#m-{mine}").get_by_role("button", name="Supersede"))
    assert site.status(ann, mine) == "superseded"
    page.goto(f"{site.url}/ui/?status=all")
    click(page.locator(f"#m-{mine}").get_by_role("button", name="Delete"))
    assert "Delete this memory for good?" in page.content()
    shot(site, page, "delete-confirm", tmp_path)
    click(page.get_by_role("link", name="Cancel"))
    assert site.status(ann, mine) == "superseded"
    click(page.locator(f"#m-{mine}").get_by_role("button", name="Delete"))
    click(page.get_by_role("button", name="Delete for good"))
    assert "Memory deleted." in page.content()
    assert site.status(ann, mine) == 404 and site.status(bob, org) == "active"


def forge(page: Page, action: str, fields: dict[str, str]) -> Any:
    """Submit a form the page never offered, from the page's own origin."""
    script = """([action, fields]) => {
        const form = document.createElement('form');
        form.method = 'post'; form.action = action;
        for (const [name, value] of Object.entries(fields)) {
            const input = document.createElement('input');
            input.type = 'hidden'; input.name = name; input.value = value;
            form.appendChild(input);
        }
        document.body.appendChild(form); form.submit();
    }"""
    with page.expect_navigation() as navigation:
        page.evaluate(script, [action, fields])
    return navigation.value


def test_refusals(page: Page, site: Site, tmp_path: Path) -> None:
    ann, eve = site.world.user("Ann", "acme"), site.world.user("Eve", "globex")
    bot = site.world.agent(site.world.user("Bob", "acme"), "Bob Bot")
    about_ann = remember(site.api, bot, "ann is allergic to nuts", subject_id=ann.id)["id"]
    sign_in(page, site, eve.api_key)
    token = page.locator("input[name=csrf_token]").first.get_attribute("value")
    assert token
    # another person's memory by id, with Eve's own valid token
    for action in ("archive", "supersede", "delete"):
        answer = forge(page, f"/ui/memories/{about_ann}/{action}", {"csrf_token": token})
        assert answer.status == 403 and page.locator("h1").inner_text() == "Refused"
    shot(site, page, "refused", tmp_path)
    page.goto(f"{site.url}/ui/memories/{about_ann}/delete")
    assert "not visible to you" in page.locator("#error-message").inner_text()
    assert site.status(ann, about_ann) == "active"
    # a form without the CSRF token
    page.goto(f"{site.url}/ui/agents")
    answer = forge(page, "/ui/agents", {"name": "Forged"})
    assert answer.status == 403 and "csrf_refused" in page.content()
    assert site.api.get("/api/v1/me/agents", headers=eve.headers).json()["data"] == []
    # an expired session
    signer = SessionSigner(site.store, 1800)
    stale, _ = signer.issue(uuid.UUID(eve.id), now=utcnow() - timedelta(hours=1))
    page.context.clear_cookies()
    page.context.add_cookies(
        [
            {
                "name": "mnemos_session",
                "value": stale,
                "domain": "127.0.0.1",
                "path": "/ui",
                "httpOnly": True,
                "sameSite": "Strict",
            }
        ]
    )
    page.goto(f"{site.url}/ui/me")
    assert page.url.endswith("/ui/signin?reason=expired")
    assert (
        "Your session has expired. Sign in again." in page.locator("#signin-message").inner_text()
    )
    shot(site, page, "session-expired", tmp_path)


def embedded(site: Site, person: Actor, query: str, memory_id: str) -> None:
    """Wait until the server's embedding worker has embedded `memory_id` (a search by meaning
    for `query` finds it), at most a minute."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        answer = site.api.get(
            f"{ME}/search",
            params={"query": query, "mode": "semantic", "limit": 50},
            headers=person.headers,
        )
        assert answer.status_code == 200, answer.text
        if memory_id in [row["id"] for row in answer.json()["data"]]:
            return
        time.sleep(0.2)
    pytest.fail(f"{memory_id} was not embedded within a minute")


def test_search_and_paging(page: Page, site: Site) -> None:
    ann = site.world.user("Ann", "teahouse")  # an organization of her own: no shared memories
    bot = site.world.agent(ann, "Ann Bot")
    for i in range(23):
        remember(site.api, bot, f"tea note {i}", subject_id=ann.id)
    for i in range(3):
        remember(site.api, bot, f"coffee with oat milk {i}", subject_id=ann.id)
    aisle = remember(
        site.api, bot, "The customer prefers aisle seats on long flights.", subject_id=ann.id
    )["id"]
    embedded(site, ann, "aisle seats on flights", aisle)
    sign_in(page, site, ann.api_key)
    assert len(shown_ids(page)) == 20
    listed = all_pages(page)
    assert listed == site.api_ids(ann) and len(listed) == 27
    assert page.get_by_role("link", name="First page").count() == 1
    page.goto(f"{site.url}/ui/")
    page.get_by_label("Search").fill("oat milk")
    press(page, "Enter")
    oat = site.api_ids(ann, content_query="oat milk")
    assert sorted(shown_ids(page)[:3]) == sorted(oat) and len(oat) == 3  # best first
    # By meaning: the question shares no word with the memory it finds.
    page.get_by_label("Search").fill("where does the client like to sit on a plane?")
    click(page.get_by_role("button", name="Apply"))
    assert shown_ids(page)[0] == aisle
    page.get_by_label("Search").fill("tea")
    click(page.get_by_role("button", name="Apply"))
    next_url = page.get_by_role("link", name="Next page").get_attribute("href")
    found = all_pages(page)  # best first, across two pages of the search's cursor
    assert len(found) == 27 == len(set(found))  # hybrid ranks every memory, none twice
    assert sorted(found[:23]) == sorted(site.api_ids(ann, content_query="tea"))
    # The cursor of the search for "tea" does not continue a search for "coffee".
    assert next_url is not None and "q=tea" in next_url
    page.goto(site.url + next_url.replace("q=tea", "q=coffee"))
    assert page.locator("#error-message").inner_text() == "cursor is invalid"
    assert "belongs to another search" in page.locator("ul.details").inner_text()


def test_download_and_erase(page: Page, site: Site, tmp_path: Path) -> None:
    ann, bob = site.world.user("Ann", "acme"), site.world.user("Bob", "acme")
    bot = site.world.agent(bob, "Bob Bot")
    about = [remember(site.api, bot, f"ann fact {i}", subject_id=ann.id)["id"] for i in range(4)]
    kept = remember(site.api, bot, "about bob", subject_id=bob.id)["id"]
    site.api.post(f"{ME}/{about[0]}/archive", headers=ann.headers)
    sign_in(page, site, ann.api_key)
    click(page.get_by_role("link", name="About me"))
    assert page.locator("#count").inner_text().startswith("4 memories")
    shot(site, page, "about-me", tmp_path)
    with page.expect_download() as download:
        page.get_by_role("link", name="Download my data").click()
    document = json.loads(Path(download.value.path()).read_text())
    exported = site.api.get(f"{ME}/export", headers=ann.headers)
    lines = [json.loads(line) for line in exported.text.splitlines() if line]
    assert document["memories"] == lines and sorted(m["id"] for m in lines) == sorted(about)
    click(page.get_by_role("button", name="Erase everything about me"))
    assert "Erase all 4 memories" in page.content()
    shot(site, page, "erase-confirm", tmp_path)
    click(page.get_by_role("button", name="Erase everything about me"))
    assert page.locator(".notice").inner_text() == "Every memory about you was erased."
    assert page.locator("#count").inner_text().startswith("0 memories")
    assert site.api_ids(ann, scope="about_me", status="all") == []
    assert site.status(bob, kept) == "active"


def test_my_agents(context: BrowserContext, page: Page, site: Site, tmp_path: Path) -> None:
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=site.url)
    ann = site.world.user("Ann", "acme")
    sign_in(page, site, ann.api_key)
    click(page.get_by_role("link", name="My agents"))
    assert page.locator("#empty").inner_text() == "You have no agents yet."
    page.get_by_label("Name").fill("Travel Agent")
    page.get_by_label("Description (optional)").fill("books trains")
    click(page.get_by_role("button", name="Register"))
    key = page.locator("#new-key").inner_text()
    assert re.fullmatch(r"mn_agent_[A-Za-z0-9_-]+", key)
    page.get_by_role("button", name="Copy").click()
    # The clipboard answers asynchronously: wait for the status line to say it is done.
    expect(page.locator("#copy-status")).to_have_text("Copied to the clipboard.")
    assert page.evaluate("navigator.clipboard.readText()") == key
    shot(site, page, "agents", tmp_path)
    assert fits_the_phone(page)
    me = site.api.get("/api/v1/agent/me", headers={"X-API-Key": key})
    assert me.status_code == 200 and me.json()["data"]["name"] == "Travel Agent"
    page.goto(f"{site.url}/ui/agents")
    assert key not in page.content() and "Travel Agent" in page.content()
    click(page.get_by_role("button", name="Delete"))
    click(page.get_by_role("button", name="Delete agent"))
    assert "Agent deleted" in page.locator(".notice").inner_text()
    assert site.api.get("/api/v1/agent/me", headers={"X-API-Key": key}).status_code == 401
