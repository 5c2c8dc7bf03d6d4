"""Signing in and out, My agents, and About me (count, download, erase)."""

from __future__ import annotations

from functools import partial

from anyio import CapacityLimiter, to_thread
from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from mnemos.api.access import authenticate
from mnemos.api.deps import Services, person_of, services, user_identity
from mnemos.api.error_handlers import refusal_headers
from mnemos.api.rights import in_threads, rights_threads
from mnemos.api.ui import rights
from mnemos.api.ui.web import (
    HOME,
    SIGN_IN,
    SIGN_IN_REASONS,
    Posted,
    SignedIn,
    UiRoute,
    cookie_session,
    drop_cookie,
    end_session,
    form_fields,
    page,
    posted,
    redirect,
    set_cookie,
    set_session,
    signed_in,
    with_notice,
)
from mnemos.api.writer_gate import WriterGate, gate_passed, run_long_write, writer_gate
from mnemos.domain import accounts
from mnemos.domain.ids import try_uuid
from mnemos.domain.models import UserContext
from mnemos.domain.sessions import Session, check_csrf
from mnemos.domain.visibility import person_plan_allows
from mnemos.errors import CsrfRefused, MnemosError, Unauthorized

router = APIRouter(prefix="/ui", route_class=UiRoute, include_in_schema=False)

AGENT_KEY_PREFIX = accounts.KEY_PREFIXES["agent"]
NEW_AGENT_COOKIE = "mnemos_new_agent"  # the key of an agent just registered, sealed
NEW_AGENT_PATH = "/ui/agents"  # the page that shows it, and the one path the cookie is sent to
NEW_AGENT_SECONDS = 120
ABOUT_ME = "/ui/me"
NOTICES = {
    "agent_deleted": "Agent deleted: its key no longer works and its private memories are gone.",
}


# --- signing in and out --------------------------------------------------------------------


def _signed_out_session(request: Request, svc: Services) -> tuple[Session, str | None]:
    """The browser's signed-out session, or a new one (with the token to set)."""
    try:
        session = cookie_session(request, svc)
        if session.user_id is None:
            return session, None
    except Unauthorized:
        pass
    token, session = svc.sessions.issue(None)
    return session, token


def _sign_in_form(
    request: Request, svc: Services, message: str | None, status: int = 200, error: bool = False
) -> Response:
    session, token = _signed_out_session(request, svc)
    response = page(
        "signin.html", status=status, who=None, csrf=session.csrf, message=message, error=error
    )
    if token is not None:
        set_session(response, request, svc, token)
    return response


@router.get("/signin")
def sign_in_page(
    request: Request, reason: str | None = Query(None), svc: Services = Depends(services)
) -> Response:
    try:
        session = cookie_session(request, svc)
        if session.user_id is not None:
            svc.sessions.person(session)  # a session ended early is shown the form, not HOME
            return redirect(HOME)
    except Unauthorized:  # SessionExpired too
        pass
    return _sign_in_form(request, svc, SIGN_IN_REASONS.get(reason or ""))


def _person(svc: Services, credential: str) -> UserContext:
    """A person's API key or bearer token (Mnemos or the external provider); agent keys are
    refused by name, so the page can say why."""
    if credential.startswith(AGENT_KEY_PREFIX):
        raise Unauthorized("This is an agent's key. Sign in with your own API key or token.")
    if credential.count(".") == 2 and not credential.startswith("mn_"):
        return person_of(svc, None, credential)
    return person_of(svc, credential, None)


@router.post("/signin")
async def sign_in(request: Request, svc: Services = Depends(services)) -> Response:
    # Reading a session may read the database (a signed-in one: was it ended?), so it runs in a
    # worker thread, never on the event loop, as everything else that reads the database.
    async def refused(message: str, status: int, headers: dict[str, str] | None = None) -> Response:
        answer = await run_in_threadpool(_sign_in_form, request, svc, message, status, True)
        answer.headers.update(headers or {})
        return answer

    fields = await form_fields(request)
    try:
        session = await run_in_threadpool(cookie_session, request, svc)
        check_csrf(session, fields.get("csrf_token"))
    except (Unauthorized, CsrfRefused):
        return await refused("The sign-in form had expired. Please try again.", 403)
    credential = fields.get("credential", "").strip()
    if not credential:
        return await refused("Enter your API key.", 422)
    try:
        ctx = await authenticate(request, lambda: _person(svc, credential), user_identity)
    except MnemosError as exc:  # a bad credential, or too many of them (when to retry)
        return await refused(exc.message, exc.status, refusal_headers(exc))
    if session.user_id is not None:
        # Signing in over a signed-in session (a second tab, another person at this browser)
        # ends it, as signing out would: a copy of its cookie opens nothing from now on. The
        # one write of a sign-in, so it waits for this process's long writes here.
        await gate_passed(request)
        await run_in_threadpool(svc.sessions.end, session)
    token, _ = await run_in_threadpool(svc.sessions.issue, ctx.user.id)
    # Without the plan the memories page refuses; About me (download, erase) never does.
    response = redirect(HOME if person_plan_allows(ctx.user, ctx.organization) else ABOUT_ME)
    set_session(response, request, svc, token)
    return response


@router.post("/signout")
def sign_out(
    request: Request, form: Posted = Depends(posted), svc: Services = Depends(services)
) -> Response:
    svc.sessions.end(form.who.session)
    response = redirect(f"{SIGN_IN}?reason=signed_out")
    end_session(response, request, svc)
    return response


# --- my agents -----------------------------------------------------------------------------


def _just_registered(svc: Services, who: SignedIn, sealed: str | None) -> tuple[str, str] | None:
    """The id and key of the agent this session just registered, from the one-time cookie."""
    value = svc.sessions.unseal(who.session, sealed, NEW_AGENT_SECONDS) if sealed else None
    if value is None:
        return None
    agent_id, _, key = value.decode().partition(" ")
    return agent_id, key


@router.get("/agents")
def agents(
    request: Request,
    done: str | None = Query(None),
    who: SignedIn = Depends(signed_in),
    svc: Services = Depends(services),
) -> Response:
    """The person's agents; after registering one, its key, shown this once (the cookie that
    carried it is dropped: a reload shows only the agent)."""
    sealed = request.cookies.get(NEW_AGENT_COOKIE)
    new = _just_registered(svc, who, sealed)
    agents = svc.store.agents_of(who.ctx.user.id)
    named = [agent.name for agent in agents if new is not None and str(agent.id) == new[0]]
    response = page(
        "agents.html",
        who=who,
        active="agents",
        agents=agents,
        notice=NOTICES.get(done or ""),
        new_name=named[0] if named else None,
        new_key=new[1] if new is not None and named else None,
    )
    if sealed is not None:
        drop_cookie(response, request, svc, NEW_AGENT_COOKIE, NEW_AGENT_PATH)
    return response


@router.post("/agents")
def register_agent(
    request: Request, form: Posted = Depends(posted), svc: Services = Depends(services)
) -> Response:
    """Register, then see other: the page it redirects to shows the key once, so reloading
    it registers nothing more. The key travels there in a cookie for that page alone, sealed
    for this session (`SessionSigner.seal`), for `NEW_AGENT_SECONDS` at most."""
    issued = accounts.create_agent(
        svc.store,
        form.who.ctx.user.id,
        form.fields.get("name", ""),
        form.fields.get("description") or None,
        max_agents=svc.settings.max_agents_per_user,
    )
    sealed = svc.sessions.seal(form.who.session, f"{issued.agent.id} {issued.api_key}".encode())
    response = redirect(NEW_AGENT_PATH)
    set_cookie(response, request, svc, NEW_AGENT_COOKIE, sealed, NEW_AGENT_PATH, NEW_AGENT_SECONDS)
    return response


@router.get("/agents/{id}/delete")
def confirm_agent_delete(
    id: str, who: SignedIn = Depends(signed_in), svc: Services = Depends(services)
) -> Response:
    agent = accounts.owned_agent(svc.store, who.ctx.user.id, try_uuid(id))
    return page(
        "confirm.html",
        who=who,
        title="Delete this agent?",
        question=(
            "Delete this agent? Its key stops working at once and the memories it kept "
            "privately are deleted; what it shared with your organization or about people stays."
        ),
        quoted=agent.name,
        action=f"/ui/agents/{agent.id}/delete",
        confirm="Delete agent",
        back="/ui/agents",
    )


@router.post("/agents/{id}/delete")
async def delete_agent(
    id: str,
    form: Posted = Depends(posted),
    svc: Services = Depends(services),
    threads: CapacityLimiter = Depends(rights_threads),
) -> Response:
    # In a thread of its own, batch by batch: no request thread, nor SQLite's writer, held long.
    delete = partial(accounts.delete_owned_agent, svc.store, form.who.ctx.user.id, try_uuid(id))
    await to_thread.run_sync(delete, limiter=threads)
    return redirect(with_notice("/ui/agents", "agent_deleted"))


# --- about me ------------------------------------------------------------------------------


@router.get("/me")
def about_me(
    done: str | None = Query(None),
    who: SignedIn = Depends(signed_in),
    svc: Services = Depends(services),
) -> Response:
    # A fixed text: a number in the link would be the link's, not the erasure's.
    notice = "Every memory about you was erased." if done == "erased" else None
    return page(
        "about.html",
        who=who,
        active="me",
        count=rights.count_about(svc, who.ctx),
        organization=who.ctx.organization.name if who.ctx.organization else None,
        notice=notice,
    )


@router.get("/me/export")
async def download(
    who: SignedIn = Depends(signed_in),
    svc: Services = Depends(services),
    threads: CapacityLimiter = Depends(rights_threads),
) -> Response:
    """Every memory about the person, every status, as one JSON document (streamed, computed
    in the threads exports use, as the export API's)."""
    return StreamingResponse(
        in_threads(rights.export_document(svc, who.ctx), threads),
        media_type="application/json",
        headers={"Content-Disposition": 'attachment; filename="mnemos-my-data.json"'},
    )


@router.get("/me/erase")
def confirm_erase(
    who: SignedIn = Depends(signed_in), svc: Services = Depends(services)
) -> Response:
    count = rights.count_about(svc, who.ctx)
    return page(
        "confirm.html",
        who=who,
        title="Erase everything about you?",
        question=(
            f"Erase all {count} {'memory' if count == 1 else 'memories'} that agents hold "
            "about you, in every status? They are gone for good, from every index."
        ),
        quoted=None,
        action="/ui/me/erase",
        confirm="Erase everything about me",
        back="/ui/me",
    )


@router.post("/me/erase")
async def erase(
    form: Posted = Depends(posted),
    svc: Services = Depends(services),
    threads: CapacityLimiter = Depends(rights_threads),
    gate: WriterGate = Depends(writer_gate),
) -> Response:
    await run_long_write(gate, threads, partial(rights.erase_about, svc, form.who.ctx))
    return redirect(with_notice("/ui/me", "erased"))
