"""People's rights over what is about them (docs/privacy.md): count, export (NDJSON), erase,
and the history of a memory, for people (`/api/v1/me/...`) and agents (`/api/v1/agent/...`).

These routers are included before the Band routers, so `/memories/export` and friends are not
taken for a memory id.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from functools import partial
from typing import Any

import orjson
from anyio import CancelScope, CapacityLimiter, to_thread
from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, StrictBool
from starlette.responses import StreamingResponse

from mnemos.api.deps import Services, agent_caller, services, user_caller
from mnemos.api.responses import JSONResponse, data, encodable, errors
from mnemos.api.routing import MnemosRoute
from mnemos.api.schemas import UserMemoryOut, memory_json
from mnemos.api.writer_gate import WriterGate, run_long_write, writer_gate
from mnemos.domain.history import by_user
from mnemos.domain.ids import iso
from mnemos.domain.models import AgentContext, Change, EncodedBatch, Erasure, Owners, UserContext
from mnemos.domain.pagination import MAX_LIMIT
from mnemos.domain.rights import Exported, HistoryPage
from mnemos.errors import invalid_field
from mnemos.ndjson import line_safe

human_router = APIRouter(prefix="/api/v1/me", tags=["Human API"], route_class=MnemosRoute)
agent_router = APIRouter(prefix="/api/v1/agent", tags=["Agent API"], route_class=MnemosRoute)

NDJSON = "application/x-ndjson"


# --- shapes: each declared once, written by one function --------------------------------------


class ActorOut(BaseModel):
    type: str
    id: str | None


class ChangeOut(BaseModel):
    event: str
    actor: ActorOut
    request_id: str | None
    superseded_by: str | None
    at: str


class HistoryMeta(BaseModel):
    limit: int
    has_more: bool
    next_cursor: str | None


HISTORY_LIMIT = Query(
    MAX_LIMIT, description=f"Changes per page, 1-{MAX_LIMIT}, default {MAX_LIMIT}"
)
HISTORY_CURSOR = Query(
    None, max_length=512, description="`meta.next_cursor` of the previous page of this history"
)


class HistoryEnvelope(BaseModel):
    data: list[ChangeOut]
    meta: HistoryMeta


class ExportedMemoryOut(UserMemoryOut):
    """One line of an export: the memory, its display names, its history."""

    history: list[ChangeOut]


class CountOut(BaseModel):
    count: int


class CountEnvelope(BaseModel):
    data: CountOut


class EraseRequest(BaseModel):
    confirm: StrictBool = False  # exactly `true`: "yes" or 1 erase nothing


class ErasedOut(BaseModel):
    erased: int
    erasure_id: str
    at: str


class ErasedEnvelope(BaseModel):
    data: ErasedOut


def change_json(change: Change) -> dict[str, Any]:
    return {
        "event": change.event.value,
        "actor": {"type": change.by.type.value, "id": change.by.id},
        "request_id": change.by.request_id,
        "superseded_by": str(change.superseded_by) if change.superseded_by else None,
        "at": iso(change.at),
    }


def exported_json(item: Exported) -> dict[str, Any]:
    return {
        **memory_json(item.memory),
        **item.display,
        "history": [change_json(c) for c in item.history],
    }


def erased_json(erasure: Erasure) -> dict[str, Any]:
    return {"erased": erasure.erased, "erasure_id": str(erasure.id), "at": iso(erasure.at)}


def ndjson_lines(batches: Iterable[list[Exported]]) -> Iterator[bytes]:
    """One chunk per batch, one JSON object per line (a chunk, not a line, per thread hop),
    `line_safe`."""
    for batch in batches:
        lines = []
        for item in batch:
            value = exported_json(item)
            try:
                lines.append(orjson.dumps(value))
            except orjson.JSONEncodeError:
                lines.append(orjson.dumps(encodable(value)))
        lines.append(b"")
        yield line_safe(b"\n".join(lines))


def encoded_lines(
    batches: Iterable[tuple[EncodedBatch, dict[Owners, dict[str, Any]]]],
) -> Iterator[bytes]:
    """`ndjson_lines` from an export the database encoded: each memory's JSON object (history
    included) with its display names spliced in before its closing brace; one chunk per batch,
    encoded once (the same lines, field for field)."""
    tails: dict[Owners, bytes] = {}
    for found, shown in batches:
        by_key: dict[bytes, bytes] = {}
        for key, owners in found.owners.items():
            tail = tails.get(owners)
            if tail is None:
                tail = tails[owners] = b"," + orjson.dumps(shown[owners])[1:-1] + b"}"
            by_key[key] = tail
        lines = [line[:-1] + by_key[key] for line, key in zip(found.lines, found.keys, strict=True)]
        lines.append(b"")
        yield line_safe(b"\n".join(lines))


RIGHTS_THREADS = 2
"""Exports, erasures, agent deletions and Tuya clear-alls at once per process, each in a thread
of its own: a long export or a large erasure or deletion never holds one of the threads that
answer everyone else's requests."""


async def rights_threads(request: Request) -> CapacityLimiter:
    state = request.app.state
    if getattr(state, "rights_threads", None) is None:
        state.rights_threads = CapacityLimiter(RIGHTS_THREADS)
    limiter: CapacityLimiter = state.rights_threads
    return limiter


async def in_threads(chunks: Iterator[bytes], threads: CapacityLimiter) -> AsyncIterator[bytes]:
    """Each chunk computed in one of `threads` (Starlette would use the request threads). A
    response ended early (the download cancelled) closes `chunks` in one of them too: an
    export may hold a database connection, and closing it waits for the batch in flight."""
    finished = False
    try:
        while True:
            chunk = await to_thread.run_sync(next, chunks, None, limiter=threads)
            if chunk is None:
                finished = True
                return
            yield chunk
    finally:
        close = getattr(chunks, "close", None)
        if not finished and close is not None:
            with CancelScope(shield=True):
                await to_thread.run_sync(close, limiter=threads)


# --- people ------------------------------------------------------------------------------------


@human_router.get(
    "/memories/count",
    response_model=CountEnvelope,
    responses=errors(401),
    summary="Count the memories about me (Mnemos extension)",
)
def count_about_me(
    ctx: UserContext = Depends(user_caller), svc: Services = Depends(services)
) -> JSONResponse:
    """How many memories are about you, every status: what an export holds and an erasure
    erases."""
    return data({"count": svc.rights.count(ctx)})


@human_router.get(
    "/memories/export",
    response_model=ExportedMemoryOut,
    response_class=StreamingResponse,
    responses={**errors(401), 200: {"content": {NDJSON: {}}}},
    summary="Export the memories about me (Mnemos extension)",
)
async def export_about_me(
    ctx: UserContext = Depends(user_caller),
    svc: Services = Depends(services),
    threads: CapacityLimiter = Depends(rights_threads),
) -> StreamingResponse:
    """Every memory about you, every status, with display names and its history: NDJSON, one
    memory per line, streamed (any number of memories in constant server memory)."""
    return StreamingResponse(
        in_threads(encoded_lines(svc.rights.export_encoded(ctx)), threads),
        media_type=NDJSON,
        headers={"Content-Disposition": 'attachment; filename="memories-about-me.ndjson"'},
    )


@human_router.post(
    "/memories/erase",
    response_model=ErasedEnvelope,
    responses=errors(401, 422),
    summary="Erase every memory about me (Mnemos extension)",
)
async def erase_about_me(
    body: EraseRequest,
    ctx: UserContext = Depends(user_caller),
    svc: Services = Depends(services),
    threads: CapacityLimiter = Depends(rights_threads),
    gate: WriterGate = Depends(writer_gate),
) -> JSONResponse:
    """Erases for good every memory about you, every status, with its history, from every
    search index, at once (all or nothing). Send `{"confirm": true}`. An erasure event without
    content remains. Memories your agents stored about others are not touched."""
    if body.confirm is not True:
        raise invalid_field("confirm", "must be true to erase every memory about you")
    erase = partial(svc.rights.erase, ctx, by_user(ctx))
    return data(erased_json(await run_long_write(gate, threads, erase)))


@human_router.get(
    "/memories/{id}/history",
    response_model=HistoryEnvelope,
    responses=errors(401, 403, 404),
    summary="A memory's history (Mnemos extension)",
)
def my_memory_history(
    id: str,
    ctx: UserContext = Depends(user_caller),
    limit: int = HISTORY_LIMIT,
    cursor: str | None = HISTORY_CURSOR,
    svc: Services = Depends(services),
) -> JSONResponse:
    """The changes of a memory visible to you, oldest first, `limit` a page: what, who, when,
    which request (never content). 404 and 403 exactly as `GET /memories/{id}`."""
    return history_answer(svc.rights.history_as_user(ctx, id, limit, cursor), limit)


# --- agents ------------------------------------------------------------------------------------


@agent_router.get(
    "/memories/{id}/history",
    response_model=HistoryEnvelope,
    responses=errors(401, 403, 404),
    summary="A memory's history (Mnemos extension)",
)
def agent_memory_history(
    id: str,
    ctx: AgentContext = Depends(agent_caller),
    limit: int = HISTORY_LIMIT,
    cursor: str | None = HISTORY_CURSOR,
    svc: Services = Depends(services),
) -> JSONResponse:
    """The changes of a memory you can read, oldest first, `limit` a page (never content); 404
    as `GET /memories/{id}`."""
    return history_answer(svc.rights.history_as_agent(ctx, id, limit, cursor), limit)


def history_answer(page: HistoryPage, limit: int) -> JSONResponse:
    more = page.next_cursor is not None
    meta = {"limit": limit, "has_more": more, "next_cursor": page.next_cursor}
    return JSONResponse({"data": [change_json(c) for c in page.changes], "meta": meta})
