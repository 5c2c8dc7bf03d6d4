"""The ASGI application: `create_app(settings)` wires settings, store, services and routers."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio import CapacityLimiter, to_thread
from fastapi import Depends, FastAPI

from mnemos import __version__
from mnemos.api import band_agent, band_human, chats, rights, superagent, tuya
from mnemos.api.deps import Services, services
from mnemos.api.error_handlers import install_error_handlers
from mnemos.api.metrics import install_metrics_route
from mnemos.api.middleware import (
    AccessMiddleware,
    BodyLimitMiddleware,
    InFlightLimitMiddleware,
    RequestContextMiddleware,
)
from mnemos.api.observe import ObserveMiddleware
from mnemos.api.responses import JSONResponse, errors
from mnemos.api.routing import named
from mnemos.api.ui import install_ui
from mnemos.api.ui.web import SIGN_IN as UI_SIGN_IN
from mnemos.api.writer_gate import WriterGate, WriterGateMiddleware
from mnemos.config import Settings, load_settings
from mnemos.domain.human import HumanMemoryService
from mnemos.domain.memories import MemoryService
from mnemos.domain.pagination import CursorCodec
from mnemos.domain.ports import Embedder
from mnemos.domain.recall import Recall
from mnemos.domain.retention import RetentionService
from mnemos.domain.rights import RightsService
from mnemos.domain.rooms import RoomService
from mnemos.domain.sessions import SessionSigner
from mnemos.domain.superagent import SuperagentMemories
from mnemos.domain.tokens import TokenVerifier
from mnemos.domain.tuya import TuyaMemories
from mnemos.domain.tuya_auth import TuyaAuth
from mnemos.embedding import embedder_from_settings, worker_embedder
from mnemos.errors import StorageUnavailable
from mnemos.indexer import Indexer, InFlight
from mnemos.mcp.http import PATH as MCP_PATH
from mnemos.mcp.http import McpEndpoint
from mnemos.ratelimit import build_limiters
from mnemos.storage import backend, open_store
from mnemos.storage.base import Store

CURSOR_SECRET = "cursor-hmac"
log = logging.getLogger("mnemos")


def build_services(
    settings: Settings, store: Store | None = None, embedder: Embedder | None = None
) -> Services:
    store = store or open_store(settings)
    codec = CursorCodec(store.secret(CURSOR_SECRET))
    memories = MemoryService(
        store,
        codec,
        max_content_chars=settings.max_content_chars,
        recall=Recall(
            store,
            embedder,
            codec,
            settings.max_query_chars,
            embed_threads=settings.resolved_worker_threads(),
        ),
        rank_content_query=settings.content_query_mode == "hybrid",
    )
    human = HumanMemoryService(memories, store)
    return Services(
        settings=settings,
        store=store,
        memories=memories,
        human=human,
        rights=RightsService(store, human),
        rooms=RoomService(store),
        tokens=TokenVerifier(settings, store),
        tuya_auth=TuyaAuth(store),
        tuya=TuyaMemories(store),
        superagent=SuperagentMemories(store),
        sessions=SessionSigner(store, settings.ui_session_seconds),
        retention=RetentionService(store, batch=settings.retention_batch),
    )


async def expire_forever(service: RetentionService, interval: float) -> None:
    """Every `interval` seconds, a retention pass in a thread of its own (never one of the
    request threads), in short batches: expired memories archived, idempotency keys past their
    day forgotten (`RetentionService.sweep`); a failed pass is logged and the next one runs."""
    limiter = CapacityLimiter(1)
    while True:
        await anyio.sleep(interval)
        try:
            expired, forgotten = await to_thread.run_sync(service.sweep, limiter=limiter)
        except Exception:
            log.exception("retention pass failed")
        else:
            if expired:
                log.info("retention: archived %d expired memories", expired)
            if forgotten:
                log.info("retention: forgot %d expired idempotency keys", forgotten)


class _FromSettings:
    """Build the embedder `MNEMOS_EMBEDDER` names (when the app starts)."""


FROM_SETTINGS = _FromSettings()


def create_app(
    settings: Settings | None = None,
    store: Store | None = None,
    embedder: Embedder | None | _FromSettings = FROM_SETTINGS,
    requests: InFlight | None = None,
) -> FastAPI:
    """A Mnemos app over an already migrated database; with an embedder (by default the one the
    settings name), it searches by meaning and embeds stored memories in a background thread
    (`mnemos.indexer`)."""
    settings = settings or load_settings()
    owns_store = store is None
    mcp = McpEndpoint(settings.max_body_bytes)
    # Counted by the middleware; the embedding worker gives way to them (a caller may pass its
    # own to watch them).
    requests = requests if requests is not None else InFlight()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Blocking work (every synchronous route and dependency) runs in this many threads.
        to_thread.current_default_thread_limiter().total_tokens = settings.resolved_worker_threads()
        # One embedder per process for the searches (onnxruntime runs concurrent calls on one
        # session); the embedding worker runs the local model on a one-thread session of its
        # own, in its niced thread (`worker_embedder`).
        chosen = (
            embedder_from_settings(settings) if isinstance(embedder, _FromSettings) else embedder
        )
        app.state.services = build_services(settings, store, chosen)
        indexer = (
            Indexer(
                app.state.services.store,
                worker_embedder(chosen),
                requests=requests,
                give_way_seconds=settings.embed_give_way_ms / 1000,
                give_way_share=settings.embed_give_way_share,
            )
            if chosen is not None
            else None
        )
        if indexer is not None:
            indexer.start()
        interval = settings.retention_interval_seconds
        expiry = (
            asyncio.create_task(expire_forever(app.state.services.retention, interval))
            if interval > 0
            else None
        )
        async with mcp.running(app.state.services):
            yield
        if expiry is not None:
            expiry.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await expiry
        if indexer is not None:
            indexer.stop()
        app.state.services.memories.recall.close()
        if owns_store:
            app.state.services.store.close()

    app = FastAPI(
        title="Mnemos",
        version=__version__,
        description="Memory server for AI agents (Band, Tuya and Superagent wire-compatible).",
        lifespan=lifespan,
        # Any route can meet these: from the server (414, 431), middleware or the body parser.
        responses=errors(400, 413, 414, 429, 431, 500, 503, 507),
    )
    limiters = build_limiters(
        settings.rate_limit_per_minute,
        settings.auth_failures_per_minute,
        settings.redis_url,
        settings.redis_prefix,
        settings.max_in_flight_per_tenant,
    )
    app.state.limiters = limiters
    gate = WriterGate(backend(settings.resolved_database_url()).one_writer)
    app.state.writer_gate = gate
    # Outermost last: request id, access line and metrics, then the in-flight cap, the access
    # checks, the body limit (a request the access checks refuse is answered before its body
    # is read: an address past its limit does not get a mebibyte held for it first), and
    # innermost a write's wait for this process's long writes (SQLite).
    app.add_middleware(WriterGateMiddleware, gate=gate, ungated=frozenset({MCP_PATH, UI_SIGN_IN}))
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(AccessMiddleware, limiter=limiters.requests, shares=limiters.shares)
    app.add_middleware(
        InFlightLimitMiddleware, max_in_flight=settings.max_in_flight, requests=requests
    )
    app.add_middleware(ObserveMiddleware, metrics=settings.metrics)  # access line, metrics
    app.add_middleware(RequestContextMiddleware)
    install_error_handlers(app)
    routers = (
        rights.human_router,  # before the Band routers: /memories/export
        rights.agent_router,
        band_agent.router,
        band_human.router,
        chats.agent_router,
        chats.human_router,
        tuya.router,
        superagent.router,
    )
    for router in routers:
        app.include_router(router)
    install_ui(app)
    tuya.answer_routing_errors_in_envelope(app)
    # FastAPI lists an included router as one opaque entry of `app.routes`: its routes, in the
    # order they are tried, for what must ask each of them (a 405's `Allow`).
    served = [route for router in routers for route in router.routes]
    app.state.served_routes = [*served, *app.state.page_routes]
    app.router.routes.append(mcp.route())  # MCP (mnemos.mcp.http): not in the OpenAPI document
    named(app.router.routes)  # FastAPI's /openapi.json and /docs, labelled by their path
    if settings.metrics:
        install_metrics_route(app, settings)

    @app.get("/healthz", tags=["Operations"], summary="Health check")
    def healthz(svc: Services = Depends(services)) -> JSONResponse:
        """200 when the database answers, 503 otherwise; with read replicas, how many are
        configured and how many are in rotation (reads fall back to the primary)."""
        try:
            svc.store.ping()
        except StorageUnavailable:
            return JSONResponse({"status": "unavailable"}, status_code=503)
        body: dict[str, object] = {"status": "ok"}
        if replicas := svc.store.replica_status():
            in_rotation = sum(state.in_rotation for state in replicas)
            body["replicas"] = {"configured": len(replicas), "in_rotation": in_rotation}
        return JSONResponse(body)

    return app


def factory() -> FastAPI:
    """Entry point for `uvicorn --factory` and worker processes: settings from the environment."""
    app = create_app(load_settings())
    # A server process allocates many short-lived objects per request and keeps its modules for
    # life: move what is loaded now out of the collector's sight, and collect the young
    # generation less often (about 10% more requests per second on the list path).
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    return app
