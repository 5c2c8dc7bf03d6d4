"""What MCP costs next to REST: the same search, one client, over `/mcp` and over the REST API.

    python -m bench.mcp_vs_rest --memories 20000 --embedder local --backend sqlite

For each backend: load the benchmark's seeded data set (with `--embedder local`, embed it all
before the server starts, so no embedding runs during the measurement), start `mnemos serve`
(one process, the same `MNEMOS_EMBEDDER`), and send the same search for the agent with the most
memories (`marigold`, about 1% of them) over each path below, one request at a time, the paths
taking turns so that drift hits them alike:

- `rest search`: `GET /api/v1/agent/memories/search?query=...` (hybrid, the default mode; by
  keyword with `--embedder none`): the very search `search_memories` makes, the baseline;
- `mcp search_memories`: the tool through the official `mcp` client's `ClientSession` over
  streamable HTTP (one session; the 2025-11-25 protocol, which the SDK serves statelessly with a
  transport and a task per request);
- `mcp search_memories, 2026`: the same through the SDK's high-level `Client`, which negotiates
  the 2026-07-28 protocol (one self-contained POST, handled in the request's task);
- `mcp search_memories, raw`: the same `tools/call` posted as JSON-RPC with httpx (no SDK
  client, no protocol header: the 2025 path): the server's share of the MCP cost;
- `rest list` and `mcp list_memories`: `content_query` lists, newest first, the same domain call
  both ways: the protocol's cost on a cheaper call.

Writes `<out>/<backend>.json` (default `bench/results/2026-12-02/recall/`) and prints a Markdown
table. Loopback only, bounded by `--requests`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client

from bench.dataset import MID, load
from bench.run import Figures, database, figures, settle, start_server
from mnemos.config import Settings
from mnemos.embedding import load_embedder
from mnemos.indexer import drain
from mnemos.storage import migrate, open_store
from mnemos.storage.sql import SqlStore

OUT = Path(__file__).parent / "results" / "2026-12-02" / "recall"
WARMUP = 30
LIMIT = 20

Probe = Callable[[], Awaitable[Any]]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


async def measure(base: str, key: str, requests: int) -> dict[str, Figures]:
    auth = {"Authorization": f"Bearer {key}"}
    search = {"query": MID, "limit": LIMIT}
    listing = {"content_query": MID, "limit": LIMIT}
    raw_body = _tool_call("search_memories", search)
    raw_headers = {**auth, "Accept": "application/json, text/event-stream"}
    async with (
        httpx.AsyncClient(base_url=base, headers={"X-API-Key": key}) as rest,
        httpx.AsyncClient(base_url=base, headers=raw_headers) as raw,
        httpx2.AsyncClient(headers=auth) as http,
        streamable_http_client(f"{base}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
        httpx2.AsyncClient(headers=auth) as http_2026,
        Client(streamable_http_client(f"{base}/mcp", http_client=http_2026)) as modern,
    ):
        await session.initialize()
        await session.list_tools()  # the client learns the output schemas it validates against
        await modern.list_tools()

        async def rest_search() -> None:
            answer = await rest.get("/api/v1/agent/memories/search", params=search)
            assert answer.status_code == 200 and answer.json()["data"], answer.text

        async def mcp_search_2026() -> None:
            result = await modern.call_tool("search_memories", search)
            assert not result.is_error and result.structured_content
            assert result.structured_content["memories"]

        async def rest_list() -> None:
            answer = await rest.get("/api/v1/agent/memories", params=listing)
            assert answer.status_code == 200 and answer.json()["data"], answer.text

        async def mcp_search() -> None:
            result = await session.call_tool("search_memories", search)
            assert not result.is_error and result.structured_content
            assert result.structured_content["memories"]

        async def mcp_list() -> None:
            result = await session.call_tool("list_memories", listing)
            assert not result.is_error and result.structured_content
            assert result.structured_content["memories"]

        async def mcp_raw() -> None:
            answer = await raw.post("/mcp", json=raw_body)
            assert answer.status_code == 200, answer.text
            assert answer.json()["result"]["structuredContent"]["memories"]

        probes: dict[str, Probe] = {
            "rest search": rest_search,
            "mcp search_memories": mcp_search,
            "mcp search_memories, 2026": mcp_search_2026,
            "mcp search_memories, raw": mcp_raw,
            "rest list": rest_list,
            "mcp list_memories": mcp_list,
        }
        latencies: dict[str, list[float]] = {name: [] for name in probes}
        spent: dict[str, float] = dict.fromkeys(probes, 0.0)
        for round_ in range(WARMUP + requests):
            for name, probe in probes.items():
                started = time.perf_counter()
                await probe()
                took = time.perf_counter() - started
                if round_ >= WARMUP:
                    latencies[name].append(took)
                    spent[name] += took
    return {name: figures(latencies[name], spent[name]) for name in probes}


def run_backend(backend: str, count: int, requests: int, embedder: str) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-mcp-bench-"))
    url, drop = database(backend, tmp)
    try:
        settings = Settings(database_url=url)
        migrate(settings)
        store = open_store(settings)
        assert isinstance(store, SqlStore)
        data = load(store, count)
        model = load_embedder(embedder)
        embedded = drain(store, model) if model is not None else 0
        settle(store)
        store.close()
        port = free_port()
        os.environ["MNEMOS_EMBEDDER"] = embedder  # the server's (start_server passes os.environ)
        server = start_server(url, port, 1)
        try:
            results = asyncio.run(measure(f"http://127.0.0.1:{port}", data.big_agent_key, requests))
        finally:
            server.terminate()
            server.wait(timeout=60)
        baseline = {"rest list": results["rest list"], "mcp list_memories": results["rest list"]}
        return {
            "backend": backend,
            "memories": count,
            "embedder": embedder,
            "embedded": embedded,
            "requests": requests,
            "query": MID,
            "limit": LIMIT,
            "clients": 1,
            "results": {
                name: {
                    "p50": round(row.p50, 3),
                    "p95": round(row.p95, 3),
                    "p99": round(row.p99, 3),
                    "rate": round(row.rate, 1),
                    "vs rest p50": round(row.p50 / baseline.get(name, rest).p50, 2),
                    "vs rest p95": round(row.p95 / baseline.get(name, rest).p95, 2),
                }
                for name, row in results.items()
                for rest in [results["rest search"]]
            },
        }
    finally:
        drop()
        shutil.rmtree(tmp, ignore_errors=True)


def markdown(run: dict[str, Any]) -> str:
    lines = [
        f"{run['backend']}, {run['memories']:,} memories, embedder {run['embedder']}, 1 client, "
        f"{run['requests']} requests per path (ms; searches vs `rest search`, lists vs `rest "
        f"list`):",
        "",
        "| path | p50 | p95 | p99 | vs REST p50 | vs REST p95 |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in run["results"].items():
        lines.append(
            f"| {name} | {row['p50']:.2f} | {row['p95']:.2f} | {row['p99']:.2f} | "
            f"{row['vs rest p50']:.2f}x | {row['vs rest p95']:.2f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgresql"])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--embedder", choices=["local", "none"], default="none")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for backend in args.backend or ["sqlite"]:
        run = run_backend(backend, args.memories, args.requests, args.embedder)
        run["date"] = datetime.now(UTC).isoformat(timespec="seconds")
        (args.out / f"{backend}.json").write_text(json.dumps(run, indent=2) + "\n")
        print(markdown(run) + "\n")


if __name__ == "__main__":
    main()
