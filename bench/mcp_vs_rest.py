"""What MCP costs next to REST: the same search, one client, over `/mcp` and over the REST API.

    python -m bench.mcp_vs_rest --memories 100000 --backend sqlite --backend postgresql

For each backend: load the benchmark's seeded data set, start `mnemos serve` (one process), and
send the same search for the agent with ~10,000 memories (`marigold`, about 1% of them) over
each path below, one request at a time, the paths taking turns so that drift hits them alike:

- `rest list`: `GET /api/v1/agent/memories?content_query=...` (newest first: REST has no ranked
  search route; it is the REST path closest to `search_memories`);
- `mcp search_memories`: the tool, ranked by relevance, through the official `mcp` client
  (`ClientSession` over streamable HTTP, one session);
- `mcp list_memories`: the tool that makes the very same domain call as `rest list`, through
  the same client: the protocol's own cost;
- `mcp search_memories, raw`: the same `tools/call` posted as JSON-RPC with httpx (no SDK
  client): the server's share of the MCP cost.

Writes `bench/results/2026-12-01/mcp/<backend>.json` and prints a Markdown table. Loopback only,
bounded by `--requests`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from bench.dataset import MID, load
from bench.run import Figures, database, figures, settle, start_server
from mnemos.config import Settings
from mnemos.storage import migrate, open_store
from mnemos.storage.sql import SqlStore

OUT = Path(__file__).parent / "results" / "2026-12-01" / "mcp"
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
    ):
        await session.initialize()
        await session.list_tools()  # the client learns the output schemas it validates against

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
            "rest list": rest_list,
            "mcp search_memories": mcp_search,
            "mcp list_memories": mcp_list,
            "mcp search_memories, raw": mcp_raw,
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


def run_backend(backend: str, count: int, requests: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-mcp-bench-"))
    url, drop = database(backend, tmp)
    try:
        settings = Settings(database_url=url)
        migrate(settings)
        store = open_store(settings)
        assert isinstance(store, SqlStore)
        data = load(store, count)
        settle(store)
        store.close()
        port = free_port()
        server = start_server(url, port, 1)
        try:
            results = asyncio.run(measure(f"http://127.0.0.1:{port}", data.big_agent_key, requests))
        finally:
            server.terminate()
            server.wait(timeout=60)
        rest = results["rest list"]
        return {
            "backend": backend,
            "memories": count,
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
                    "vs rest p50": round(row.p50 / rest.p50, 2),
                    "vs rest p95": round(row.p95 / rest.p95, 2),
                }
                for name, row in results.items()
            },
        }
    finally:
        drop()
        shutil.rmtree(tmp, ignore_errors=True)


def markdown(run: dict[str, Any]) -> str:
    lines = [
        f"{run['backend']}, {run['memories']:,} memories, 1 client, {run['requests']} requests "
        f"per path (ms):",
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
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for backend in args.backend or ["sqlite"]:
        run = run_backend(backend, args.memories, args.requests)
        run["date"] = datetime.now(UTC).isoformat(timespec="seconds")
        (args.out / f"{backend}.json").write_text(json.dumps(run, indent=2) + "\n")
        print(markdown(run) + "\n")


if __name__ == "__main__":
    main()
