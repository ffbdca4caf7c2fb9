"""Serve tools over MCP (streamable HTTP) with the `mcp` SDK's low-level server.

One `McpEndpoint` serves every tool host of a process (one app alone, or all gateway instances): the
host resolves who is calling and what they may see from the HTTP request. Change notifications
reach both protocol eras: `subscriptions/listen` streams (2026-07-28) and, for handshake-era
clients, their connection.
"""

from __future__ import annotations

import contextlib
import json
import logging
import weakref
from typing import Any, Protocol

import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from starlette.requests import Request

log = logging.getLogger("agentenv.mcp")


class ToolHost(Protocol):
    """What an MCP endpoint serves. `request` is the Starlette request of the call."""

    def channel(self, request: Request) -> ChangeChannel: ...

    async def list_tools(self, request: Request) -> list[types.Tool]: ...

    async def call_tool(
        self, request: Request, name: str, arguments: dict[str, Any], meta: dict[str, Any]
    ) -> types.CallToolResult: ...

    def input_schema(self, name: str) -> dict[str, Any] | None: ...


class ChangeChannel:
    """Who must hear that a tool list changed: listen streams and handshake-era connections."""

    def __init__(self) -> None:
        self.bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.bus)
        self._connections: weakref.WeakSet = weakref.WeakSet()

    def track(self, session: Any) -> None:
        connection = getattr(session, "_connection", None)
        if connection is not None and not connection.protocol_version.startswith("2026"):
            self._connections.add(connection)

    async def tools_changed(self) -> None:
        await self.bus.publish(ToolsListChanged())
        for connection in list(self._connections):
            with contextlib.suppress(Exception):  # a closed connection simply misses it
                await connection.send_tool_list_changed()


def mcp_tool(spec) -> types.Tool:
    """The MCP listing of an app tool (the card lists the same name, description and schema)."""
    from agentenv.envs.card import META_HIDDEN_BY_DEFAULT

    return types.Tool(
        name=spec.name,
        description=spec.description,
        input_schema=spec.input_schema,
        annotations=types.ToolAnnotations(read_only_hint=spec.read_only),
        meta={META_HIDDEN_BY_DEFAULT: True} if spec.hidden else None,
    )


def tool_result(value: Any) -> types.CallToolResult:
    """A successful result: JSON text for every client, structured content for those that read it."""
    structured = value if isinstance(value, dict) else {"result": value}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(value, ensure_ascii=False))],
        structured_content=structured,
    )


def tool_error(message: str) -> types.CallToolResult:
    """An error the agent reads as the tool's result (it can correct itself and retry)."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


def build_server(host: ToolHost, name: str, version: str) -> Server:
    async def on_list_tools(ctx, params) -> types.ListToolsResult:
        host.channel(ctx.request).track(ctx.session)
        return types.ListToolsResult(tools=await host.list_tools(ctx.request))

    async def on_call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        channel = host.channel(ctx.request)
        channel.track(ctx.session)
        meta = dict(params.meta) if params.meta else {}
        return await host.call_tool(ctx.request, params.name, params.arguments or {}, meta)

    async def on_listen(ctx, params):
        return await host.channel(ctx.request).listen(ctx, params)

    return Server(
        name,
        version=version,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        on_subscriptions_listen=on_listen,
        # Without this the SDK runs the tool-list handler to validate every call's params.
        get_tool_input_schema=host.input_schema,
    )


class McpEndpoint:
    """An ASGI app serving MCP for a tool host. Run `lifespan()` around the web server's life."""

    def __init__(self, host: ToolHost, name: str, version: str = "1", *, max_body_bytes: int = 4 * 1024 * 1024) -> None:
        self.server = build_server(host, name, version)
        self.manager = StreamableHTTPSessionManager(
            app=self.server, json_response=True, max_request_body_size=max_body_bytes
        )

    @contextlib.asynccontextmanager
    async def lifespan(self):
        async with self.manager.run():
            yield

    async def __call__(self, scope, receive, send) -> None:
        await self.manager.handle_request(scope, receive, send)


def refuse(message: str) -> MCPError:
    """A JSON-RPC error for requests that are not the agent's to correct (auth, unknown instance)."""
    return MCPError(code=types.INVALID_REQUEST, message=message)
