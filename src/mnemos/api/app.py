"""The ASGI application: `create_app(settings)` wires settings, store, services and routers."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from anyio import to_thread
from fastapi import Depends, FastAPI

from mnemos import __version__
from mnemos.api import band_agent, band_human, chats, superagent, tuya
from mnemos.api.deps import Services, services
from mnemos.api.error_handlers import install_error_handlers
from mnemos.api.middleware import (
    AccessMiddleware,
    BodyLimitMiddleware,
    InFlightLimitMiddleware,
    RequestContextMiddleware,
)
from mnemos.api.responses import JSONResponse, errors
from mnemos.config import Settings, load_settings
from mnemos.domain.human import HumanMemoryService
from mnemos.domain.memories import MemoryService
from mnemos.domain.pagination import CursorCodec
from mnemos.domain.rooms import RoomService
from mnemos.domain.superagent import SuperagentMemories
from mnemos.domain.tokens import TokenVerifier
from mnemos.domain.tuya import TuyaMemories
from mnemos.domain.tuya_auth import TuyaAuth
from mnemos.errors import StorageUnavailable
from mnemos.ratelimit import build_limiters
from mnemos.storage import open_store
from mnemos.storage.base import Store

CURSOR_SECRET = "cursor-hmac"


def build_services(settings: Settings, store: Store | None = None) -> Services:
    store = store or open_store(settings)
    codec = CursorCodec(store.secret(CURSOR_SECRET))
    memories = MemoryService(store, codec, max_content_chars=settings.max_content_chars)
    return Services(
        settings=settings,
        store=store,
        memories=memories,
        human=HumanMemoryService(memories, store),
        rooms=RoomService(store),
        tokens=TokenVerifier(settings, store),
        tuya_auth=TuyaAuth(store),
        tuya=TuyaMemories(store),
        superagent=SuperagentMemories(store),
    )


def create_app(settings: Settings | None = None, store: Store | None = None) -> FastAPI:
    """A Mnemos app over an already migrated database."""
    settings = settings or load_settings()
    owns_store = store is None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Blocking work (every synchronous route and dependency) runs in this many threads.
        to_thread.current_default_thread_limiter().total_tokens = settings.resolved_worker_threads()
        app.state.services = build_services(settings, store)
        yield
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
    )
    app.state.limiters = limiters
    # Outermost last: request id, then the in-flight cap, the body limit, the access checks.
    app.add_middleware(AccessMiddleware, limiter=limiters.requests)
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(InFlightLimitMiddleware, max_in_flight=settings.max_in_flight)
    app.add_middleware(RequestContextMiddleware)
    install_error_handlers(app)
    app.include_router(band_agent.router)
    app.include_router(band_human.router)
    app.include_router(chats.agent_router)
    app.include_router(chats.human_router)
    app.include_router(tuya.router)
    app.include_router(superagent.router)

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
