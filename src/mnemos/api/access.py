"""Who a request counts against: the identity its authentication resolved.

Every authenticating dependency (Band agent and person, Superagent person, Tuya project) goes
through `authenticate`, so the request limit is keyed on what authentication actually found
(`agent:<id>`, `user:<id>`, `tuya:<client id>`) and never on a header authentication ignored.
A failed authentication is counted against the client address; past the failure limit the
address is refused (429) before any credential is looked up. Requests that carry no credential
at all are counted against their address by `AccessMiddleware`.
"""

from __future__ import annotations

import ipaddress
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from starlette.routing import Match
from starlette.types import Scope

from mnemos.domain.tenants import tenant_of
from mnemos.errors import MnemosError, RateLimited, TenantBusy, Unauthorized
from mnemos.ratelimit import Limiters, TenantShares

if TYPE_CHECKING:
    from mnemos.storage.base import Store

T = TypeVar("T")
SESSION_COOKIE = "mnemos_session"  # the web page's session (`api/ui/web.py`)
RATE_LIMIT_STATE = "rate_limit"
CALLER_STATE = "caller"  # "agent:<id>", "user:<id>", "tuya:<client id>": the access log's caller
SHARE_STATE = "tenant_share"  # whose slot the request holds, given back by `AccessMiddleware`
BUSY_STATE = "tenant_busy"  # set on a request refused for its tenant's share (metrics)
ADDRESS_BUSY = "Too many requests from this address are in flight; retry shortly"


IPV6_CLIENT_PREFIX = 64  # one client's share of IPv6 addresses: a site is given a /64 or more
# Failed authentications are counted by address and by /64: some hosts give customers single
# addresses of a shared /64, so the /64's limit is this many times an address's (one customer's
# failures do not lock its neighbours out; addresses taken one by one across a /64 still meet
# a limit).
IPV6_SITE_FAILURES = 8


def client_address(scope: Scope) -> str:
    """The client a request is counted against by address: its IPv4 address, or the /64 its
    IPv6 address lies in (one client holds every address of its /64: counted one by one, each
    limit would be multiplied by 2**64)."""
    client = scope.get("client") or ("unknown", 0)
    address = str(client[0])
    if ":" not in address:
        return address
    try:
        found = ipaddress.IPv6Address(address.split("%", 1)[0])
    except ValueError:
        return address
    if found.ipv4_mapped is not None:
        return str(found.ipv4_mapped)
    return str(ipaddress.IPv6Network((found, IPV6_CLIENT_PREFIX), strict=False))


def failure_keys(scope: Scope) -> list[tuple[str, int]]:
    """What a failed authentication counts against, each with its limit's multiple: an IPv4
    address; an IPv6 address and, at `IPV6_SITE_FAILURES` times the limit, its /64."""
    site = client_address(scope)
    if "/" not in site:  # IPv4 (mapped ones included), or an address that is not one
        return [(site, 1)]
    own = str(ipaddress.IPv6Address(str((scope.get("client") or ("",))[0]).split("%", 1)[0]))
    return [(own, 1), (site, IPV6_SITE_FAILURES)]


def limiters(request: Request) -> Limiters:
    found: Limiters = request.app.state.limiters
    return found


def _refused(retry_after: int, message: str | None = None) -> MnemosError:
    return RateLimited(retry_after, message)


def counted_by_page(scope: Scope) -> bool:
    """Whether a request carries a session cookie and goes to a page that counts it (one of
    the app's `state.page_routes`; `ui.web.count_page_request`): against the person when the
    cookie holds a signed-in session, not by `AccessMiddleware` against the address, so that
    anonymous requests from a shared address (behind NAT) do not lock a signed-in person out of
    the page while the API takes their key. Any other request (a static file, a path or method
    no page serves) is counted against the address as before."""
    if not has_session_cookie(scope):
        return False
    routes = getattr(getattr(scope.get("app"), "state", None), "page_routes", ())
    return any(route.matches(scope)[0] is Match.FULL for route in routes)


def has_session_cookie(scope: Scope) -> bool:
    """Whether the request carries a cookie named as the page's session (valid or not)."""
    marker = (SESSION_COOKIE + "=").encode()
    return any(
        name.lower() == b"cookie" and marker in value for name, value in scope.get("headers", [])
    )


def address_identity(scope: Scope) -> str:
    """What a request without a credential is counted against: its client address."""
    return f"ip:{client_address(scope)}"


def upload_identity(scope: Scope) -> str:
    """Whose slot any other request holds while its body arrives: its address's uploads (a
    count apart, so that its address's requests without a credential never refuse it)."""
    return f"upload:{client_address(scope)}"


def take_share(scope: Scope, shares: TenantShares | None, tenant: str) -> bool:
    """Let the request hold one of `tenant`'s slots until it ends (`give_back_share`, which
    `AccessMiddleware` calls whatever the ending); False when the tenant holds its share. A
    request holds one slot at most: the first it took."""
    state = scope.setdefault("state", {})
    if shares is None or SHARE_STATE in state:
        return True
    if not shares.take(tenant):
        state[BUSY_STATE] = True
        return False
    state[SHARE_STATE] = tenant
    return True


def give_back_share(scope: Scope, shares: TenantShares | None) -> None:
    tenant = scope.get("state", {}).pop(SHARE_STATE, None)
    if tenant is not None and shares is not None:
        shares.give_back(tenant)


def act_for_tenant(
    request: Request,
    store: Store,
    organization_id: uuid.UUID | None,
    person_id: uuid.UUID,
    refuse: Callable[[int, str | None], MnemosError] | None = None,
) -> None:
    """From here to its end the request acts for the caller's tenant (the organization, or
    the person without one): it holds one of the tenant's slots in this process, refused
    `tenant_busy` (or as `refuse` renders it) when the tenant holds its share, and its reads see
    the tenant's writes (`Store.act_for`). Every authenticated request that reaches memories
    passes here once its caller is known."""
    tenant = f"tenant:{tenant_of(organization_id, person_id)}"
    if not take_share(request.scope, limiters(request).shares, tenant):
        busy = TenantBusy()
        raise busy if refuse is None else refuse(busy.retry_after, busy.message)
    store.act_for(organization_id, person_id)


async def count_address(request: Request) -> None:
    """Count one request against the client address (as `AccessMiddleware` counts requests
    without a credential); `rate_limited` past the limit, `tenant_busy` when the address holds
    its share of requests at once."""
    if not take_share(request.scope, limiters(request).shares, address_identity(request.scope)):
        raise TenantBusy(ADDRESS_BUSY)
    limiter = limiters(request).requests
    if limiter is None:
        return
    verdict = await limiter.check(address_identity(request.scope))
    request.scope.setdefault("state", {})[RATE_LIMIT_STATE] = verdict
    if not verdict.allowed:
        raise RateLimited(verdict.retry_after)


async def count_unanswered_address(request: Request) -> None:
    """Count a request no route took (a 404 or 405 of the router) against its address when
    nothing counted it yet: one with a credential header under the API's paths is left to
    authentication by `AccessMiddleware`, which never ran for it. `rate_limited` past the
    address's limit."""
    state = request.scope.setdefault("state", {})
    limiter = limiters(request).requests
    if limiter is None or RATE_LIMIT_STATE in state:
        return
    verdict = await limiter.check(address_identity(request.scope))
    state[RATE_LIMIT_STATE] = verdict
    if not verdict.allowed:
        raise RateLimited(verdict.retry_after)


async def count_request(request: Request, identity: str) -> None:
    """Count one request against `identity`; `rate_limited` past the per-minute limit."""
    request.scope.setdefault("state", {})[CALLER_STATE] = identity
    limiter = limiters(request).requests
    if limiter is None:
        return
    verdict = await limiter.check(identity)
    request.scope.setdefault("state", {})[RATE_LIMIT_STATE] = verdict
    if not verdict.allowed:
        raise RateLimited(verdict.retry_after)


async def authenticate(
    request: Request,
    resolve: Callable[[], T],
    identity: Callable[[T], str],
    failures: tuple[type[MnemosError], ...] = (Unauthorized,),
    refuse: Callable[[int, str | None], MnemosError] = _refused,
) -> T:
    """Run `resolve` (blocking: in a worker thread) unless the caller's address is over its
    failure limit; count a failure, or count the request against the identity it resolved.

    `refuse` renders a refusal in the API family's own shape (Tuya: its envelope)."""
    guard = limiters(request)
    counted_as = failure_keys(request.scope)
    if guard.failures is not None:
        wait = guard.failures.retry_after(counted_as)
        if wait is not None:
            raise refuse(wait, "Too many failed authentications from this address; retry later")
    try:
        found = await run_in_threadpool(resolve)
    except failures:
        if guard.failures is not None:
            await guard.failures.failed(counted_as)
        raise
    try:
        await count_request(request, identity(found))
    except RateLimited as exc:
        raise refuse(exc.retry_after, None) from None
    return found
