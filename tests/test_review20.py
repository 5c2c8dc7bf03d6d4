"""Twelfth hostile review (review20): the MCP server and the people's web page.

Each test states the behaviour a finding asks for; each was a strict xfail, failing for the
finding's reason (docs/decisions.md, "A hostile review of the MCP server and the web page
(2026-12-05, helper "review20")"), until its fix ("review20's findings fixed").
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from mcp.shared.exceptions import MCPError

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain import accounts
from mnemos.storage import sqlite
from mnemos.storage.base import Store
from mnemos.storage.postgres import driver_url
from mnemos.storage.schema import write_marks
from tests.api.test_ui_http import csrf_of, signed_in
from tests.live.mcp_client import ok, stdio_session
from tests.test_review18 import HELD_FOR, _all_ended, _in_thread, deletions_held
from tests.world import World, memory_body

AGENT_MEMORIES = "/api/v1/agent/memories"
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


# --- 1. signing in on the page waits for another tenant's erasure --------------------------------


def test_signing_in_on_the_page_does_not_wait_for_another_tenants_erasure(
    client: TestClient, store: Store, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer gate lets requests through by method, `/mcp` excepted since review19: a
    `POST /ui/signin` only reads (the credential, the signed-out session; no row is written),
    yet it waits on the event loop while any person's erasure runs in the process (seconds
    for a large person on SQLite, review18's figures): nobody of any tenant can sign in to the
    page meanwhile. review19 named it beside its finding 2 ("The page's `POST /ui/signin`
    waits too"); the fix let only `/mcp` through. Suggested: let `/ui/signin` through the gate
    as `/mcp` is (`WriterGateMiddleware` with a set of ungated paths), since it writes nothing
    (the session secret exists once the sign-in form was served)."""
    if not isinstance(store, sqlite.SqliteStore):
        pytest.skip("the gate closes only on SQLite (one writer)")
    ann = world.user("Ann", "Acme")
    about_ann = client.post(
        AGENT_MEMORIES,
        json=memory_body("Ann prefers email", subject_id=ann.id),
        headers=world.agent(ann).headers,
    )
    assert about_ann.status_code == 201, about_ann.text
    ivy = world.user("Ivy", "Initech")
    form = client.get("/ui/signin")  # a GET: the gate never holds it
    assert form.status_code == 200
    cookie = form.cookies.get("mnemos_session")
    assert cookie
    fields = {"csrf_token": csrf_of(form.text), "credential": ivy.api_key}
    answers: dict[str, Any] = {}
    started: list[threading.Thread] = []
    gate = client.app.state.writer_gate  # type: ignore[attr-defined]
    with deletions_held(monkeypatch) as held:

        def erase() -> None:
            erased = client.post(
                "/api/v1/me/memories/erase", json={"confirm": True}, headers=ann.headers
            )
            answers["erase"] = erased.status_code

        def sign_in() -> None:
            signed = client.post(
                "/ui/signin",
                data=fields,
                headers={"Cookie": f"mnemos_session={cookie}"},
                follow_redirects=False,
            )
            answers["signin"] = signed.status_code

        _in_thread(erase, started)
        assert held.wait(HELD_FOR)
        signer = _in_thread(sign_in, started)
        signer.join(HELD_FOR / 6)  # answered at once when not held
        waited_at_gate = signer.is_alive() and gate.waiting >= 1
    _all_ended(started)
    assert not waited_at_gate and answers.get("signin") == 303, answers


# --- 5. the page's own 429s say nothing of when to retry -----------------------------------------


def test_a_page_refused_for_the_persons_limit_says_when_to_retry(
    settings: Settings, store: Store, world: World
) -> None:
    """A signed-in person past their request limit gets the page's 429 (`UiRoute`: the
    `RateLimited` from `count_page_request` becomes `error_page`), but without `Retry-After`:
    `error_page` renders status and message only. Every other 429 carries it (the REST and
    MCP answers, the middleware's page 429 for an address, Tuya's envelope). The same holds for
    a tenant's share (`tenant_busy`, raised by `act_for_tenant` in `signed_in`) and the
    sign-in form refused by the failed-authentication limit (`sign_in`'s `refused`).
    Suggested: `error_page` (or `UiRoute`) sets `Retry-After` from `exc.retry_after` when
    the refusal has one, as `refusal_page`'s callers do."""
    ann = world.user("Ann", "Acme")
    limited = settings.model_copy(update={"rate_limit_per_minute": 4})
    with TestClient(create_app(limited, store)) as client:
        signed_in(client, ann)
        answers = [client.get("/ui/agents") for _ in range(4)]
        refused = [answer for answer in answers if answer.status_code == 429]
        assert refused, [answer.status_code for answer in answers]
        assert refused[0].headers["content-type"].startswith("text/html")
        assert "retry-after" in refused[0].headers, dict(refused[0].headers)
        assert 1 <= int(refused[0].headers["retry-after"]) <= 60


# --- 7. DELETE /mcp: advertised, then refused by the SDK in another shape -------------------------


def test_delete_on_mcp_is_refused_as_every_method_not_served(
    client: TestClient, world: World
) -> None:
    """`/mcp` routes POST and DELETE (`McpEndpoint.route`), so `GET /mcp` answers 405 with
    `Allow: DELETE, POST`. But a stateless manager has no session to end: DELETE, once
    authenticated (and counted), reaches the SDK, which answers 405 as a JSON-RPC error
    (`{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, ...}}`) without `Allow`
    (RFC 9110 requires it on a 405) and without the request id; with the 2026 protocol's
    header, a 405 with an empty body. Suggested: route POST only (GET and DELETE then answer
    Mnemos's own 405 `method_not_allowed` with `Allow: POST`), as docs/mcp.md says of GET."""
    agent = world.agent(world.user("Ann", "Acme"))
    got = client.get("/mcp", headers={**MCP_HEADERS, **agent.headers})
    assert got.status_code == 405
    deleted = client.delete("/mcp", headers={**MCP_HEADERS, **agent.headers})
    assert deleted.status_code == 405
    assert deleted.json().get("error", {}).get("code") == "method_not_allowed", deleted.text
    assert "DELETE" not in got.headers["allow"] and "POST" in deleted.headers.get("allow", "")


# --- 4. signing in over a signed-in session leaves that session open -----------------------------


def test_signing_in_over_a_session_ends_that_session(client: TestClient, world: World) -> None:
    """`POST /ui/signin` accepts the CSRF token of a signed-in session (the form is served to
    a person whose session ended early, and a second tab keeps a signed-in form), issues the
    new person's session and replaces the cookie, but never ends the session it replaced: a
    copy of Ann's cookie (another tab, a shared machine's earlier user) keeps seeing,
    changing and erasing everything about Ann until it expires, although this browser moved
    on, as if Ann had signed out. Sign out ends a session for every copy (`ended_sessions`);
    replacing it should too. Suggested: in `sign_in`, when the cookie held a signed-in
    session, `svc.sessions.end(session)` before issuing the new one."""
    ann, bob = world.user("Ann", "Acme"), world.user("Bob", "Acme")
    csrf = signed_in(client, ann)
    anns_cookie = client.cookies.get("mnemos_session")
    switched = client.post(
        "/ui/signin",
        data={"csrf_token": csrf, "credential": bob.api_key},
        follow_redirects=False,
    )
    assert switched.status_code == 303, switched.text
    copy = TestClient(client.app)  # another browser, the app already started
    copy.cookies.set("mnemos_session", anns_cookie or "", path="/ui")
    still = copy.get("/ui/me", follow_redirects=False)
    assert still.status_code == 303, "Ann's replaced session still opens her page"


# --- 2. `mnemos mcp`'s writes are marked for every tenant ----------------------------------------


def test_stdio_writes_are_marked_for_their_tenant_only(
    settings: Settings, store: Store, world: World
) -> None:
    """With read replicas, a write moves its tenant's mark (`write_marks`), and a write made
    for no caller moves `*`, which every reader of every tenant, in every process, waits for
    ("CLI, scripts"; `replicas.written`). `mnemos mcp` serves one known caller (checked at start
    and at every message) but never says whom it acts for (`Store.act_for`, which the HTTP
    dependencies call): every `store_memory`, status change or delete over stdio marks `*`. An
    agent storing steadily through stdio thus sends every tenant's reads to the primary (or
    to a second round trip to a replica) whenever the replica is behind its last store: the
    replicas' offload, for the whole deployment, undone by one local agent. Here the replica
    URL names the primary itself (out of rotation, not a standby: marks are still written).
    Suggested: `serve_stdio`'s `caller_of` (or `_run`) calls `svc.store.act_for(...)` with the
    caller's organization and owner, as `api.deps.authenticated` does."""
    if isinstance(store, sqlite.SqliteStore):
        pytest.skip("read replicas are PostgreSQL's")
    agent = world.agent(world.user("Ann", "Acme"))
    env = {
        "MNEMOS_DATABASE_URL": settings.database_url,
        "MNEMOS_DATABASE_REPLICA_URLS": settings.database_url,
        "MNEMOS_EMBEDDER": "none",
    }

    async def run() -> None:
        async with stdio_session(env, agent.api_key) as session:
            ok(await session.call_tool("store_memory", memory_body("tea, green")["memory"]))

    asyncio.run(run())
    engine = sa.create_engine(driver_url(settings.database_url))
    try:
        with engine.connect() as conn:
            marked = set(conn.execute(sa.select(write_marks.c.tenant)).scalars())
    finally:
        engine.dispose()
    assert marked, "no write mark at all: the replica URL was not taken"
    assert "*" not in marked and f"org:{agent.organization_id}" in marked, marked


# --- 3. with the plan off, the page is a dead end ----------------------------------------------


def test_a_person_without_the_plan_can_reach_their_rights_and_sign_out(
    client: TestClient, world: World, store: Store
) -> None:
    """Rights outlive a plan ("Export and erasure do not need the memory plan"; `/ui/me`
    answers 200 with the plan off, `test_plan_off_is_a_clear_page`). But signing in sends
    everyone to `/ui/`, which is then the 403 `plan_required` error page, rendered by
    `UiRoute` with `error_page(exc)` and so `who=None`: no navigation (no "About me", no "My
    agents") and no Sign out form; its one link, "Back to my memories", is `/ui/` again. A
    person whose organization's plan was switched off cannot find Download my data or Erase
    without typing a URL, nor sign out (the session lives on until the browser closes). The
    same holds for every error page of a signed-in person. Suggested: render refusals with
    the signed-in person when known (`error_page(exc, who)` from the session `UiRoute` read),
    and send a person without the plan to `/ui/me` after sign-in."""
    ann = world.user("Ann", "acme")
    store.set_memory_enabled("user", uuid.UUID(ann.id), False)
    signed_in(client, ann, lands="/ui/me")  # About me: Download and Erase
    landing = client.get("/ui/")  # the memories page (a bookmark, the navigation's Memories)
    assert landing.status_code == 403 and "plan_required" in landing.text
    assert 'href="/ui/me"' in landing.text, "no way from the landing page to About me"
    assert 'action="/ui/signout"' in landing.text, "no Sign out on the landing page"


# --- 6. stdio: a protocol request with a credential no longer valid ------------------------------


def test_stdio_refuses_a_rotated_credential_in_its_own_error_shape(
    settings: Settings, store: Store, world: World
) -> None:
    """`mnemos mcp` checks its credential at every message, so a rotated key takes effect at
    once (docs/mcp.md). A tool call then answers `unauthorized: Invalid API key` as a tool
    result, but `tools/list` (`server.list_tools`, which does not catch `MnemosError`) lets
    `Unauthorized` escape into the SDK: the client gets JSON-RPC error code 0 with the bare
    message, no `unauthorized` code, and the server writes a full traceback to stderr
    ("handler for 'tools/list' raised") for what is an expected refusal. Suggested: catch
    `MnemosError` in `list_tools` and raise the SDK's `MCPError` with a code of its own
    (e.g. -32001) and the text `<code>: <message>`, as tool refusals are written."""
    agent = world.agent(world.user("Ann", "Acme"))
    env = {"MNEMOS_DATABASE_URL": settings.database_url, "MNEMOS_EMBEDDER": "none"}

    async def run() -> Any:
        async with stdio_session(env, agent.api_key) as session:
            assert (await session.list_tools()).tools
            accounts.rotate_agent_key(store, uuid.UUID(agent.id))
            try:
                await session.list_tools()
            except MCPError as refused:
                return refused.error
            return None

    error = asyncio.run(run())
    assert error is not None, "tools/list still answered with a rotated key"
    assert error.code != 0 and error.message.startswith("unauthorized"), error
