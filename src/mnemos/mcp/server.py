"""The MCP server: lists a caller's tools and runs them, over any transport.

Who calls is decided by the transport (`http.py`: the request's credential, checked before the
SDK sees the request; `stdio.py`: `MNEMOS_API_KEY`), handed in as `caller_of`. Every answer is a
tool result: the memory (or `{"memories", "next_cursor"}`) as structured content with a short
text, or, for anything Mnemos refuses, `isError` with a text that starts with the REST API's
error code, so a model can correct itself. A bad argument is never a protocol error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from anyio import to_thread
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from starlette.requests import Request

from mnemos import __version__
from mnemos.api.deps import Services
from mnemos.api.observe import answered_error, answered_write
from mnemos.api.params import remote_embed_threads
from mnemos.api.writer_gate import gate_passed
from mnemos.errors import MnemosError, ValidationFailed
from mnemos.mcp.tools import (
    AGENT_TOOLS,
    PERSON_TOOLS,
    SEARCH_MODE,
    Caller,
    Tool,
    find_tool,
    tools_for,
)

log = logging.getLogger("mnemos.mcp")

CallerOf = Callable[[ServerRequestContext[Any, Any]], Awaitable[Caller]]
REFUSED = -32001  # JSON-RPC's server-defined range: Mnemos refused a protocol request

INSTRUCTIONS = (
    "Mnemos keeps memories for agents across conversations. Before answering something that "
    "may depend on what was learned earlier, call search_memories; when you learn something "
    "worth keeping (a preference, a fact about someone, a guideline, how a task is done), "
    "call store_memory with one self-contained statement. A tool that refuses answers with an "
    "error whose text starts with a code (validation_failed, invalid_memory_type, not_found, "
    "forbidden, plan_required, ...): fix the arguments and call again."
)


def describe(tool: Tool) -> types.Tool:
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=tool.input_schema(),
        output_schema=tool.output_schema(),
        annotations=types.ToolAnnotations(
            read_only_hint=tool.read_only,
            destructive_hint=tool.destructive,
            idempotent_hint=tool.read_only or tool.name != "store_memory",
            open_world_hint=False,
        ),
    )


def _refusal_parts(exc: MnemosError) -> tuple[str, dict[str, Any]]:
    """A refusal's text, `<code>: <message>` then the details, if any, and its error object."""
    text = f"{exc.code}: {exc.message}"
    error: dict[str, Any] = {"code": exc.code, "message": exc.message}
    if exc.details:
        text += f" {json.dumps(exc.details, sort_keys=True)}"
        error["details"] = exc.details
    return text, error


def refusal(exc: MnemosError) -> types.CallToolResult:
    """A refusal as a tool result."""
    text, error = _refusal_parts(exc)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content={"error": error},
        is_error=True,
    )


def protocol_refusal(exc: MnemosError) -> MCPError:
    """A refusal of a request that is not a tool call (`tools/list`: over stdio, a credential
    rotated or revoked since the start) as the protocol's error: code `REFUSED`, the tool
    result's text as the message and its error object as the data."""
    text, error = _refusal_parts(exc)
    return MCPError(REFUSED, text, error)


def _observed(
    ctx: ServerRequestContext[Any, Any], result: types.CallToolResult, code: str
) -> types.CallToolResult:
    """A refusal answered inside HTTP 200, named for the access log and the metrics as a REST
    refusal is by its status (`api/observe.py`)."""
    if isinstance(ctx.request, Request):
        answered_error(ctx.request.state, code)
    return result


def _invalid(exc: ValidationError) -> ValidationFailed:
    details: dict[str, str] = {}
    for err in exc.errors():
        field = ".".join(str(part) for part in err.get("loc", ())) or "arguments"
        details.setdefault(field, str(err.get("msg", "invalid")))
    return ValidationFailed("Invalid arguments", details=details)


def _parsed(tool: Tool, arguments: dict[str, Any]) -> Any:
    try:
        # Strictly, as JSON: a value of another JSON type than the tool's input schema says
        # (`true` or `"3"` for an integer) is refused, not converted (pydantic's lax mode).
        return tool.arguments.validate_json(json.dumps(arguments), strict=True)
    except ValidationError as exc:
        raise _invalid(exc) from None


def _answer(svc: Services, caller: Caller, tool: Tool, parsed: Any) -> types.CallToolResult:
    """Run one call on its parsed arguments (blocking: the domain and storage are synchronous)."""
    answer = tool.run(svc, caller, parsed)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=answer.text)],
        structured_content=answer.structured,
    )


def _run(
    svc: Services, caller: Caller, tool: Tool, arguments: dict[str, Any]
) -> types.CallToolResult:
    """Validate and run one call."""
    return _answer(svc, caller, tool, _parsed(tool, arguments))


def _embedding_first(
    svc: Services, caller: Caller, tool: Tool, arguments: dict[str, Any]
) -> tuple[Any, str | None]:
    """The parsed arguments of a call that may rank by meaning, and the text to embed before it
    runs (None: nothing), once the call's checks passed (`Tool.embeds`)."""
    parsed = _parsed(tool, arguments)
    assert tool.embeds is not None
    return parsed, tool.embeds(svc, caller, parsed)


async def _called(
    ctx: ServerRequestContext[Any, Any],
    svc: Services,
    caller: Caller,
    tool: Tool,
    arguments: dict[str, Any],
) -> types.CallToolResult:
    """One call in threads. A call that ranks by an embedder on another machine has its query
    embedded first, once the call's checks passed (`Tool.embeds`), on the REST API's limiter
    (`api/params.py` `remote_embed_threads`): a slow endpoint then holds neither a request
    thread nor a database connection, and a refused call costs no embedding."""
    recall = svc.memories.recall
    if tool.embeds is None or not recall.embeds_elsewhere(SEARCH_MODE, None):
        return await to_thread.run_sync(_run, svc, caller, tool, arguments)
    parsed, text = await to_thread.run_sync(_embedding_first, svc, caller, tool, arguments)
    if text is not None:
        request = ctx.request if isinstance(ctx.request, Request) else None
        threads = remote_embed_threads(request) if request is not None else None
        parsed.embedded(await to_thread.run_sync(recall.embedded_first, text, limiter=threads))
    return await to_thread.run_sync(_answer, svc, caller, tool, parsed)


def build_server(svc: Services, caller_of: CallerOf) -> Server[Any]:
    """A low-level MCP server whose tools run on `svc` for the caller `caller_of` finds."""
    described = {tools: [describe(tool) for tool in tools] for tools in (AGENT_TOOLS, PERSON_TOOLS)}

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        try:
            caller = await caller_of(ctx)
        except MnemosError as exc:  # an expected refusal, not a handler's failure
            raise protocol_refusal(exc) from None
        return types.ListToolsResult(tools=described[tools_for(caller)])

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            caller = await caller_of(ctx)
            tool = find_tool(caller, params.name)
            if tool.write is not None:  # as the REST API's writes (`api/writer_gate.py`)
                await gate_passed(ctx.request if isinstance(ctx.request, Request) else None)
            result = await _called(ctx, svc, caller, tool, params.arguments or {})
        except MnemosError as exc:
            return _observed(ctx, refusal(exc), exc.code)
        except Exception:  # a bug: say so to the model, keep the details in the log
            log.exception("MCP tool %s failed", params.name)
            return _observed(ctx, refusal(MnemosError()), MnemosError.code)
        if tool.write is not None and isinstance(ctx.request, Request):
            answered_write(ctx.request.state, "mcp", tool.write)
        return result

    server: Server[Any] = Server(
        "mnemos",
        version=__version__,
        title="Mnemos memory",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    server.middleware = []  # the SDK's default is a tracing span per message: no exporter here
    return server
