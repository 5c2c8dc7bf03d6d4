"""Tuya's AI-agent device memory API, with Tuya's signatures and envelope.

Every answer is HTTP 200 (the official connector cannot read any other):
`{"success": true, "result": ..., "t": ms, "tid": "..."}` or
`{"success": false, "code": int, "msg": "...", "t": ms, "tid": "..."}`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from anyio import CapacityLimiter, to_thread
from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError

from mnemos.api.access import act_for_tenant, authenticate
from mnemos.api.deps import Services, services
from mnemos.api.error_handlers import answer_routing_errors_as
from mnemos.api.observe import answered_error
from mnemos.api.responses import JSONResponse
from mnemos.api.rights import rights_threads
from mnemos.api.routing import MnemosRoute
from mnemos.domain.tuya import TuyaMemories
from mnemos.domain.tuya_auth import SignedRequest, TuyaCaller, TuyaError, param_illegal
from mnemos.errors import MnemosError, StorageUnavailable

TUYA_PATHS = "/v1.0/"  # Tuya's routes answer refusals in their own envelope
DEVICE = "/v1.0/cloud/agent/ai/chat/b/devices/{device_id}"
T = TypeVar("T")
TOO_FREQUENT = 1110  # Tuya's "request frequency over limit": its rate limits and shares
URI_PATH_INVALID = 1108  # Tuya's "uri path invalid": a path or method no Tuya route serves


def tuya_error_code(code: int) -> str:
    """How a refusal in Tuya's envelope is named in metrics and access logs."""
    return f"tuya_{code}"


def envelope(
    request: Request, result: Any = None, code: int | None = None, msg: str = ""
) -> JSONResponse:
    body: dict[str, Any] = {"success": code is None, "t": int(time.time() * 1000)}
    if code is None:
        body["result"] = result
    else:
        body.update(code=code, msg=msg)
        answered_error(request.state, tuya_error_code(code))
    body["tid"] = getattr(request.state, "request_id", "") or uuid.uuid4().hex
    return JSONResponse(body)


class TuyaRoute(MnemosRoute):
    """Renders every refusal in Tuya's envelope, with HTTP 200."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        original = super().get_route_handler()

        async def handler(request: Request) -> Response:
            try:
                return await original(request)
            except TuyaError as exc:
                return envelope(request, code=exc.tuya_code, msg=exc.message)
            except RequestValidationError as exc:
                names = ",".join(str(err.get("loc", ["", "?"])[-1]) for err in exc.errors())
                return envelope(request, code=1109, msg=f"param is illegal: {names}")
            except StorageUnavailable as exc:
                return envelope(request, code=1001, msg=exc.message)
            except MnemosError as exc:
                return envelope(request, code=1109, msg=exc.message)

        return handler


router = APIRouter(tags=["Tuya device memories"], route_class=TuyaRoute)


def answer_routing_errors_in_envelope(app: FastAPI) -> None:
    """A path under `/v1.0/` that no route serves (404), or a method its route does not (405),
    is answered in the envelope (1108; 1110 past the address's limit), as every other refusal
    on Tuya's paths: the official connector reads only `success` and `code`."""
    answer_routing_errors_as(app, lambda path: path.startswith(TUYA_PATHS), _in_envelope)


def _in_envelope(request: Request, found: Response) -> Response:
    message = orjson.loads(bytes(found.body))["error"]["message"]
    if found.status_code == 429:
        return envelope(request, code=TOO_FREQUENT, msg="request frequency over limit, retry later")
    allowed = found.headers.get("allow")
    detail = f"{request.method} is not served here (Allow: {allowed})" if allowed else message
    return envelope(request, code=URI_PATH_INVALID, msg=f"uri path invalid: {detail}")


async def signed(request: Request) -> SignedRequest:
    return SignedRequest(
        method=request.method,
        path=request.url.path,
        query=request.query_params.multi_items(),
        body=await request.body(),
        headers={key.lower(): value for key, value in request.headers.items()},
    )


def _too_many(_retry_after: int, message: str | None) -> TuyaError:
    return TuyaError(TOO_FREQUENT, message or "request frequency over limit, retry later")


def _project(client_id: str) -> str:
    return f"tuya:{client_id}"


async def _authenticated(
    request: Request, resolve: Callable[[], T], identity: Callable[[T], str]
) -> T:
    """Signature checks counted like every authentication (see `mnemos.api.access`)."""
    return await authenticate(request, resolve, identity, failures=(TuyaError,), refuse=_too_many)


async def caller(
    request: Request, signature: SignedRequest = Depends(signed), svc: Services = Depends(services)
) -> TuyaCaller:
    who = await _authenticated(
        request, lambda: svc.tuya_auth.caller(signature), lambda who: _project(who.client_id)
    )
    act_for_tenant(request, svc.store, who.organization_id, who.organization_id, _too_many)
    return who


@dataclass(frozen=True)
class RoleParams:
    bind_role_type: str | None
    role_id: str | None


async def role_params(
    bind_role_type: str | None = Query(
        None, description="0 custom role, 1 template role, 2 single role (no role)"
    ),
    role_id: str | None = Query(None, description="The role; required for types 0 and 1"),
) -> RoleParams:
    return RoleParams(bind_role_type, role_id)


def _flag(value: str | None) -> bool:
    if value is None or value.lower() in ("false", "0", ""):
        return False
    if value.lower() in ("true", "1"):
        return True
    raise param_illegal("clear_all_memory", "must be true or false")


@router.get("/v1.0/token", summary="Get an access token")
async def token(
    request: Request,
    grant_type: str | None = Query(None),
    signature: SignedRequest = Depends(signed),
    svc: Services = Depends(services),
) -> JSONResponse:
    """`grant_type=1`: an access and a refresh token for a correctly signed project."""
    client_id = signature.headers.get("client_id", "")
    granted = await _authenticated(
        request, lambda: svc.tuya_auth.grant(signature, grant_type), lambda _: _project(client_id)
    )
    return envelope(request, granted)


@router.get("/v1.0/token/{refresh_token}", summary="Refresh an access token")
async def refresh(
    request: Request,
    refresh_token: str,
    signature: SignedRequest = Depends(signed),
    svc: Services = Depends(services),
) -> JSONResponse:
    """A new token pair; the old pair stops working."""
    client_id = signature.headers.get("client_id", "")
    renewed = await _authenticated(
        request,
        lambda: svc.tuya_auth.refresh(signature, refresh_token),
        lambda _: _project(client_id),
    )
    return envelope(request, renewed)


@router.get(f"{DEVICE}/memories", summary="Query memory list")
def list_memories(
    request: Request,
    device_id: str,
    role: RoleParams = Depends(role_params),
    who: TuyaCaller = Depends(caller),
    svc: Services = Depends(services),
) -> JSONResponse:
    """The device's memories for a role, grouped by effective scope."""
    memories = svc.tuya
    binding = memories.binding(who, role.bind_role_type, role.role_id)
    return envelope(request, memories.list_groups(who, device_id, binding))


@router.post(f"{DEVICE}/memories", summary="Write memories (Mnemos extension)")
async def write_memories(
    request: Request,
    device_id: str,
    who: TuyaCaller = Depends(caller),
    svc: Services = Depends(services),
) -> JSONResponse:
    """Write `memory_list` entries; a key that holds an active value is superseded."""
    try:
        body = await request.json()
    except (ValueError, RecursionError):  # RecursionError: nesting too deep to parse
        raise param_illegal("body", "must be a JSON object") from None
    if not isinstance(body, dict):
        raise param_illegal("body", "must be a JSON object")
    memories = svc.tuya

    def run() -> None:
        binding = memories.binding(who, body.get("bind_role_type"), body.get("role_id"))
        memories.write(
            who, device_id, binding, memories.parse_entries(binding, body.get("memory_list"))
        )

    await run_in_threadpool(run)
    return envelope(request, True)


@router.delete(f"{DEVICE}/memories", summary="Delete memories")
async def delete_memories(
    request: Request,
    device_id: str,
    role: RoleParams = Depends(role_params),
    clear_all_memory: str | None = Query(None),
    memory_keys: str | None = Query(None),
    who: TuyaCaller = Depends(caller),
    svc: Services = Depends(services),
    threads: CapacityLimiter = Depends(rights_threads),
) -> JSONResponse:
    """Delete keys (at most 20, comma-separated) or, with `clear_all_memory`, everything."""
    memories = svc.tuya
    clear_all = _flag(clear_all_memory)

    def run() -> None:
        binding = memories.binding(who, role.bind_role_type, role.role_id)
        keys = memories.parse_keys(memory_keys, clear_all)
        memories.delete(who, device_id, binding, keys, clear_all)

    if clear_all:  # every memory of the device, batch by batch: a thread of its own
        await to_thread.run_sync(run, limiter=threads)
    else:
        await run_in_threadpool(run)
    return envelope(request, True)


@router.get(f"{DEVICE}/memory/switch", summary="Memory switch")
def memory_switch(
    request: Request,
    device_id: str,
    who: TuyaCaller = Depends(caller),
    svc: Services = Depends(services),
) -> JSONResponse:
    """Whether memory is on for this project's organization."""
    TuyaMemories.device(device_id)
    return envelope(request, svc.tuya.switch(who))


@router.delete(f"{DEVICE}/chat-context", summary="Clear chat context")
def clear_context(
    request: Request,
    device_id: str,
    role: RoleParams = Depends(role_params),
    who: TuyaCaller = Depends(caller),
    svc: Services = Depends(services),
) -> JSONResponse:
    """Mnemos keeps no device chat context, so there is nothing to clear; parameters are checked."""
    memories = svc.tuya
    TuyaMemories.device(device_id)
    if role.bind_role_type is not None:
        memories.binding(who, role.bind_role_type, role.role_id)
    return envelope(request, True)
