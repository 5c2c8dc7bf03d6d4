"""The official `mcp` client against a live Mnemos: over streamable HTTP and over stdio."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

T = TypeVar("T")


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


@asynccontextmanager
async def http_session(base_url: str, headers: dict[str, str]) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        streamable_http_client(f"{base_url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def stdio_session(env: dict[str, str], credential: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mnemos", "mcp"],
        env={**os.environ, **env, "MNEMOS_API_KEY": credential},
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def over_http(
    base_url: str, headers: dict[str, str], work: Callable[[ClientSession], Awaitable[T]]
) -> T:
    """Run `work` in one MCP session over HTTP."""

    async def run() -> T:
        async with http_session(base_url, headers) as session:
            return await work(session)

    return asyncio.run(run())


def text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def refused(result: CallToolResult, code: str) -> dict[str, Any]:
    """Assert a tool error with this REST error code; its structured error."""
    assert result.is_error, result
    assert text(result).startswith(f"{code}: "), text(result)
    assert result.structured_content is not None
    error: dict[str, Any] = result.structured_content["error"]
    assert error["code"] == code
    return error


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, text(result)
    assert result.structured_content is not None
    return result.structured_content
