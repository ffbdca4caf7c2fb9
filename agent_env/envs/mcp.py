"""Serve tools over MCP (streamable HTTP) with the `mcp` SDK's low-level server.

One `McpEndpoint` serves every tool host of a process (one app alone, or all gateway instances): the
host resolves who is calling and what they may see from the HTTP request. Change notifications
reach both protocol eras: `subscriptions/listen` streams (2026-07-28) and, for handshake-era
clients, their connection.

The `mcp` SDK (half a second of imports) is loaded when MCP is first used, not when a gateway or an app
server starts: a gateway that only serves REST, admin calls and runs never loads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import weakref
from typing import TYPE_CHECKING, Any, Protocol

from starlette.requests import Request

if TYPE_CHECKING:
    import mcp.types as types
    from mcp.server.lowlevel import Server
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.shared.exceptions import MCPError

log = logging.getLogger("agent_env.mcp")


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
        self._bus: Any = None  # the listen streams' bus, made when the first one listens
        self._listen: Any = None
        self._connections: weakref.WeakSet = weakref.WeakSet()

    async def listen(self, ctx: Any, params: Any) -> Any:
        if self._listen is None:
            from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler

            self._bus = InMemorySubscriptionBus()
            self._listen = ListenHandler(self._bus)
        return await self._listen(ctx, params)

    def track(self, session: Any) -> None:
        connection = getattr(session, "_connection", None)
        if connection is not None and not connection.protocol_version.startswith("2026"):
            self._connections.add(connection)

    async def tools_changed(self) -> None:
        if self._bus is not None:
            from mcp.server.subscriptions import ToolsListChanged

            await self._bus.publish(ToolsListChanged())
        for connection in list(self._connections):
            with contextlib.suppress(Exception):  # a closed connection simply misses it
                await connection.send_tool_list_changed()


def mcp_tool(spec) -> types.Tool:
    """The MCP listing of an app tool (the card lists the same name, description and schema)."""
    import mcp.types as types

    from agent_env.envs.card import HIDDEN_BY_DEFAULT_META_KEY

    return types.Tool(
        name=spec.name,
        description=spec.description,
        input_schema=spec.input_schema,
        annotations=types.ToolAnnotations(read_only_hint=spec.read_only),
        meta={HIDDEN_BY_DEFAULT_META_KEY: True} if spec.hidden else None,
    )


def tool_result(value: Any) -> types.CallToolResult:
    """A successful result: JSON text for every client (a string as itself, as MCP servers answer one), structured
    content for those that read it."""
    import mcp.types as types

    structured = value if isinstance(value, dict) else {"result": value}
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=structured,
    )


def tool_error(message: str, fields: dict[str, object] | None = None) -> types.CallToolResult:
    """An error the agent reads as the tool's result (it can correct itself and retry); `fields`: the error as
    structured content too (the protocol's `{code, message, retryable, applied}`)."""
    import mcp.types as types

    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], structured_content=fields, is_error=True
    )


def build_server(host: ToolHost, name: str, version: str) -> Server:
    import mcp.types as types
    from mcp.server.lowlevel import Server

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
    """An ASGI app serving MCP for a tool host. Run `lifespan()` around the web server's life; the SDK's session
    manager is made, and run until the lifespan ends, when the first MCP request comes."""

    def __init__(self, host: ToolHost, name: str, version: str = "1", *, max_body_bytes: int = 4 * 1024 * 1024) -> None:
        self._host, self._name, self._version, self._max_body_bytes = host, name, version, max_body_bytes
        self.manager: StreamableHTTPSessionManager | None = None
        self._starting = asyncio.Lock()
        self._stop: asyncio.Event | None = None
        self._running: asyncio.Task | None = None

    @property
    def sessions(self) -> dict[str, Any]:
        """The live MCP sessions by id (the SDK's own table: it has no hook for a session's end)."""
        return self.manager._server_instances if self.manager is not None else {}

    async def end_session(self, session_id: str) -> bool:
        transport = self.sessions.get(session_id)
        if transport is None:
            return False
        await self.manager._discard_session(session_id, transport)  # type: ignore[union-attr]
        return True

    @contextlib.asynccontextmanager
    async def lifespan(self):
        self._stop = asyncio.Event()
        try:
            yield
        finally:
            self._stop.set()
            if self._running is not None:
                await asyncio.gather(self._running, return_exceptions=True)

    async def _start(self) -> StreamableHTTPSessionManager:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        if self._stop is None or self._stop.is_set():
            raise RuntimeError("the MCP endpoint serves only within its lifespan()")
        manager = StreamableHTTPSessionManager(
            app=build_server(self._host, self._name, self._version),
            json_response=True,
            max_request_body_size=self._max_body_bytes,
        )
        running = asyncio.get_running_loop().create_future()
        stop = self._stop

        async def hold() -> None:  # the manager's task group lives in this task until the lifespan ends
            async with manager.run():
                running.set_result(None)
                await stop.wait()

        self._running = asyncio.create_task(hold())
        await asyncio.wait([running, self._running], return_when=asyncio.FIRST_COMPLETED)
        if not running.done():
            await self._running  # it failed to start: its error
        return manager

    async def __call__(self, scope, receive, send) -> None:
        if self.manager is None:
            async with self._starting:
                if self.manager is None:
                    self.manager = await self._start()
        await self.manager.handle_request(scope, receive, send)


def owned_by(scope, owner: str) -> None:
    """Say whose request this is (`owner`: who the server authenticated). The SDK's session manager binds a
    session to the owner of the request that opened it, and answers anyone else's request in it (a DELETE
    too) as for a session that does not exist: 404. It reads the owner where Starlette's authentication puts
    it, `scope["user"]`."""
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    scope["user"] = AuthenticatedUser(AccessToken(token="", client_id=owner, scopes=[]))  # no secret kept


def refuse(message: str) -> MCPError:
    """A JSON-RPC error for requests that are not the agent's to correct (auth, unknown instance)."""
    import mcp.types as types
    from mcp.shared.exceptions import MCPError

    return MCPError(code=types.INVALID_REQUEST, message=message)
