"""What every page of the web page (`/ui/`) shares: templates, the session cookie, CSRF checks,
and the route class that turns refusals into pages instead of JSON.

The session cookie (`mnemos_session`, path `/ui`) holds a signed session (`domain/sessions.py`),
never a key; it is HttpOnly and SameSite=Strict, and Secure when the request came over HTTPS
(or `MNEMOS_UI_SECURE_COOKIE`). It has no Max-Age: the browser drops it when it closes, and the
server refuses it once the session inside has expired, which is how the page can say so.
"""

from __future__ import annotations

import urllib.parse
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from fastapi import Depends, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute

from mnemos.api.access import (
    CALLER_STATE,
    SESSION_COOKIE,
    act_for_tenant,
    count_address,
    count_request,
    has_session_cookie,
)
from mnemos.api.deps import Services, person_identity, services, user_identity
from mnemos.api.error_handlers import refusal_headers
from mnemos.domain.models import UserContext
from mnemos.domain.sessions import Session, check_csrf
from mnemos.errors import MnemosError, SessionExpired, Unauthorized, ValidationFailed

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"
COOKIE = SESSION_COOKIE
COOKIE_PATH = "/ui"
HOME = "/ui/"
SIGN_IN = "/ui/signin"  # its POST only reads: the writer gate lets it through (`app.py`)
MAX_FORM_FIELDS = 20
SESSION_STATE = "ui_session"  # the session the page read, for `signed_in`
SIGNED_IN_STATE = "ui_signed_in"  # the person `signed_in` found, for `UiRoute`'s refusals

# Every asset is Mnemos's own: nothing from another origin may load, frame or be posted to.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
# The stylesheet and the script: the same, but a browser may keep them (they hold nothing).
ASSET_HEADERS = {name: value for name, value in SECURITY_HEADERS.items() if name != "Cache-Control"}

templates = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    """A rendered template (`who`: the person signed in, for the navigation; `active`: the
    navigation entry of this page; `notice`: a message to show)."""
    values = {"who": None, "active": None, "notice": None, **context}
    return HTMLResponse(templates.get_template(name).render(**values), status_code=status)


def redirect(url: str) -> RedirectResponse:
    """See other (a POST answered by a page to GET)."""
    return RedirectResponse(url, status_code=303)


def safe_back(value: str | None) -> str:
    """A path of this page to return to; anything else (another site, a scheme) is the home."""
    if (
        value
        and value.startswith(HOME)
        and "//" not in value
        and "\\" not in value
        and value.isprintable()
    ):
        return value
    return HOME


def with_notice(url: str, notice: str, **extra: str | int) -> str:
    """`url` with a notice code (a fixed text on the page: nothing the client wrote is shown)."""
    parts = urllib.parse.urlsplit(url)
    query = [
        (k, v)
        for k, v in urllib.parse.parse_qsl(parts.query)
        if k not in {"done", "n"} and k not in extra
    ]
    query += [("done", notice), *((k, str(v)) for k, v in extra.items())]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


# --- the session cookie --------------------------------------------------------------------


def secure(request: Request, svc: Services) -> bool:
    return svc.settings.ui_secure_cookie or request.url.scheme == "https"


def set_cookie(
    response: Response,
    request: Request,
    svc: Services,
    name: str,
    value: str,
    path: str = COOKIE_PATH,
    max_age: int | None = None,
) -> None:
    """A cookie of the page: HttpOnly, SameSite=Strict, Secure over HTTPS."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=path,
        httponly=True,
        samesite="strict",
        secure=secure(request, svc),
    )


def drop_cookie(
    response: Response, request: Request, svc: Services, name: str, path: str = COOKIE_PATH
) -> None:
    response.delete_cookie(
        name, path=path, httponly=True, samesite="strict", secure=secure(request, svc)
    )


def set_session(response: Response, request: Request, svc: Services, token: str) -> None:
    set_cookie(response, request, svc, COOKIE, token)


def end_session(response: Response, request: Request, svc: Services) -> None:
    drop_cookie(response, request, svc, COOKIE)


def cookie_session(request: Request, svc: Services) -> Session:
    """The session the cookie holds (anyone's, or nobody's); `unauthorized` without one."""
    token = request.cookies.get(COOKIE)
    if not token:
        raise Unauthorized("Not signed in")
    return svc.sessions.read(token)


@dataclass(frozen=True)
class SignedIn:
    ctx: UserContext
    session: Session

    @property
    def csrf(self) -> str:
        return self.session.csrf


async def signed_in(request: Request, svc: Services = Depends(services)) -> SignedIn:
    """The person this browser is signed in as (the page counted the request against them:
    `UiRoute`)."""

    def resolve() -> SignedIn:
        session = request.scope.get("state", {}).get(SESSION_STATE) or cookie_session(request, svc)
        return SignedIn(svc.sessions.person(session), session)

    who = await run_in_threadpool(resolve)
    state = request.scope.setdefault("state", {})
    state[CALLER_STATE] = user_identity(who.ctx)
    state[SIGNED_IN_STATE] = who  # a refusal from here on is their page (`UiRoute`)
    act_for_tenant(request, svc.store, who.ctx.organization_id, who.ctx.user.id)
    return who


async def form_fields(request: Request) -> dict[str, str]:
    """An urlencoded form (the only kind these pages send), first value of each field."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = await request.body()
    if kind != "application/x-www-form-urlencoded" and body:
        raise ValidationFailed("Forms are sent as application/x-www-form-urlencoded")
    try:
        pairs = urllib.parse.parse_qsl(
            body.decode(), keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS
        )
    except (UnicodeDecodeError, ValueError):
        raise ValidationFailed("This form could not be read") from None
    fields: dict[str, str] = {}
    for name, value in pairs:
        fields.setdefault(name, value)
    return fields


@dataclass(frozen=True)
class Posted:
    """A state-changing request from a signed-in person, its CSRF token checked."""

    who: SignedIn
    fields: dict[str, str]

    @property
    def back(self) -> str:
        return safe_back(self.fields.get("back"))


async def posted(request: Request, who: SignedIn = Depends(signed_in)) -> Posted:
    fields = await form_fields(request)
    check_csrf(who.session, fields.get("csrf_token"))
    return Posted(who, fields)


# --- refusals as pages ---------------------------------------------------------------------

SIGN_IN_REASONS = {
    "expired": "Your session has expired. Sign in again.",
    "signin": "Sign in to see what agents remember about you.",
    "signed_out": "You have signed out.",
}
TITLES = {401: "Sign in", 403: "Refused", 404: "Not found", 409: "Not possible now"}


def error_page(exc: MnemosError, who: SignedIn | None = None) -> HTMLResponse:
    """A refusal as a page, with the refusal's headers (`Retry-After` on a 429)."""
    title = TITLES.get(exc.status, "Check your input" if exc.status == 422 else "Error")
    answer = page(
        "error.html",
        status=exc.status,
        title=title,
        message=exc.message,
        code=exc.code,
        who=who,
        details=exc.details or {},
    )
    answer.headers.update(refusal_headers(exc))
    return answer


def is_page(path: str) -> bool:
    """Whether a path is the web page's (its refusals are pages, not the API's JSON)."""
    return path == COOKIE_PATH or path.startswith(COOKIE_PATH + "/")


def refusal_page(exc: MnemosError) -> HTMLResponse:
    """The error page with the page's security headers, for a refusal answered before any of
    the page's routes ran (a path or method none serves, a middleware's refusal)."""
    answer = error_page(exc)
    answer.headers.update(SECURITY_HEADERS)
    return answer


def _person_of_cookie(request: Request) -> uuid.UUID | None:
    """The person whose signed-in session the request's cookie holds (kept for `signed_in`),
    or None."""
    svc: Services = request.app.state.services
    try:
        session = cookie_session(request, svc)
    except Unauthorized:  # SessionExpired too
        return None
    if session.user_id is not None:
        request.scope.setdefault("state", {})[SESSION_STATE] = session
    return session.user_id


async def count_page_request(request: Request) -> None:
    """Count a page request that carries a session cookie (`has_session_cookie`): against the
    person its signed-in session names, else against the address; `rate_limited` past the
    limit."""
    person = await run_in_threadpool(_person_of_cookie, request)
    if person is None:
        await count_address(request)
    else:
        await count_request(request, person_identity(person))


def without_body(answer: Response) -> Response:
    """A GET's answer to a HEAD: its status and headers, no body (a download is not computed:
    its chunks are made as they are sent)."""
    head = Response(status_code=answer.status_code)
    head.raw_headers = list(answer.raw_headers)
    return head


class UiRoute(APIRoute):
    """Answers every page with the security headers; a missing or expired session goes to the
    sign-in page (saying which), any other refusal is a page with its status and message. A
    request with a session cookie is counted here, before the page runs (`counted_by_page`).
    A page served to GET answers HEAD too, as GET without the body."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if self.methods is not None and "GET" in self.methods:
            self.methods.add("HEAD")

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        original = super().get_route_handler()

        async def handler(request: Request) -> Response:
            try:
                # The middleware left a request with a session cookie to the page (this route
                # is one: `counted_by_page`), so only the cookie needs checking here.
                if has_session_cookie(request.scope):
                    await count_page_request(request)
                response = await original(request)
            except SessionExpired:
                response = redirect(f"{SIGN_IN}?reason=expired")
            except Unauthorized:
                response = redirect(f"{SIGN_IN}?reason=signin")
            except MnemosError as exc:  # with the navigation and Sign out, once signed in
                response = error_page(exc, request.scope.get("state", {}).get(SIGNED_IN_STATE))
            response.headers.update(SECURITY_HEADERS)
            return without_body(response) if request.method == "HEAD" else response

        return handler
