"""`mnemos mcp`: the MCP server over stdio, straight on the database, for one local caller.

The caller is the credential in `MNEMOS_API_KEY` (an agent's key, or a person's key or token),
checked at start (a bad one exits with an error on stderr) and again at every message, so a
rotated key, a revoked token or a plan switched off takes effect at once, as over HTTP. Only
protocol messages go to stdout: logs and errors go to stderr.

The embedder `MNEMOS_EMBEDDER` names is built as `serve` builds it, so `search_memories` finds
by meaning here too, and an embedding worker (`mnemos.indexer`) embeds what waits in the queue
(what this process stores, and what any other wrote), sharing the one model.
"""

from __future__ import annotations

from typing import Any

import anyio
from anyio import to_thread
from mcp.server import ServerRequestContext
from mcp.server.stdio import stdio_server

from mnemos.api.app import build_services
from mnemos.api.deps import Services, any_credential, tenant_person
from mnemos.config import Settings
from mnemos.embedding import embedder_from_settings, worker_embedder
from mnemos.indexer import Indexer
from mnemos.mcp.server import build_server
from mnemos.mcp.tools import Caller


def check_credential(svc: Services, credential: str) -> Caller:
    """The caller behind `credential`: raises `Unauthorized` for a bad one."""
    return any_credential(svc, None, credential)


def serve_stdio(settings: Settings, credential: str) -> None:
    """Serve MCP on stdin/stdout until stdin closes (the database is already migrated)."""
    embedder = embedder_from_settings(settings)
    svc = build_services(settings, embedder=embedder)
    indexer = Indexer(svc.store, worker_embedder(embedder)) if embedder is not None else None
    try:
        check_credential(svc, credential)  # a bad credential starts nothing
        if indexer is not None:
            indexer.start()

        async def caller_of(_ctx: ServerRequestContext[Any, Any]) -> Caller:
            caller = await to_thread.run_sync(check_credential, svc, credential)
            # As HTTP authentication does (`api.deps.authenticated`): this message's writes are
            # marked for the caller's tenant only, and its reads see them (read replicas).
            svc.store.act_for(caller.organization_id, tenant_person(caller))
            return caller

        server = build_server(svc, caller_of)

        async def main() -> None:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

        anyio.run(main)
    finally:
        if indexer is not None:
            indexer.stop()
        svc.memories.recall.close()
        svc.store.close()
