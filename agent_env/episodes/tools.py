"""A trainer's tools over the gateway's REST surface: the fastest transport it offers.

A trainer calls many tools per turn and plays many turns: one keep-alive client per gateway is kept by the
`Episodes` connection across turns and episodes, and each call is one small POST (no MCP session to open,
no JSON-RPC envelope). The role token travels only to the gateway that holds the instance (its `mcp_url`'s
origin), never to another. `list`/`call` behave as the MCP tools do (`agent_env.agents.sdk.Tools`): a tool's
JSON result, or `ToolFailed` with its error text.
"""

from __future__ import annotations

import builtins
import json
from typing import Any, NotRequired, TypedDict
from urllib.parse import quote, urlsplit

from agent_env import telemetry, tls
from agent_env.agents.sdk import ToolFailed
from agent_env.gateway_client import GatewayRefused, GatewayUnavailable
from agent_env.keepalive import HttpReply, KeepAliveClient

# What a tool call's refusal looks like over REST: unknown tool, not the role's, bad arguments or its own error.
TOOL_REFUSALS = (403, 404, 422)
MAX_ANSWER_BYTES = 64 * 1024 * 1024
Arguments = dict[str, Any]  # a tool's arguments: the JSON object its input schema describes


class ToolInfo(TypedDict):
    """A tool of the role, as the gateway lists it (and MCP's tools/list)."""

    name: str
    description: str
    inputSchema: dict[str, object]  # a JSON Schema


def tools_path(mcp_url: str) -> tuple[str, str]:
    """`<gateway>/envs/<instance>/mcp` -> (`<gateway>` origin, `/envs/<instance>/tools`, the REST path)."""
    parts = urlsplit(mcp_url)
    path, sep, _ = parts.path.rpartition("/mcp")
    if not sep or parts.scheme not in ("http", "https"):
        raise ValueError(f"not an instance's MCP URL: {mcp_url!r}")
    return f"{parts.scheme}://{parts.netloc}", path + "/tools"


def client_for(clients: dict[str, KeepAliveClient], origin: str) -> KeepAliveClient:
    if origin not in clients:
        clients[origin] = KeepAliveClient(origin, ssl_context=tls.context(), max_body=MAX_ANSWER_BYTES)
    return clients[origin]


class ToolCall(TypedDict):
    """A call the trainer's agent made this turn: its tool, its arguments, and its result or error."""

    tool: str
    arguments: Arguments
    result: NotRequired[Any]
    error: NotRequired[str]


class RestTools:
    def __init__(self, http: KeepAliveClient, path: str, token: str | None) -> None:
        self._http, self._path = http, path
        self._headers = {"authorization": f"Bearer {token}"} if token else {}
        self.calls: list[ToolCall] = []

    async def _send(self, method: str, path: str, body: bytes = b"") -> HttpReply:
        headers = {**self._headers, "content-type": "application/json"} if body else self._headers
        try:
            return await self._http.request(method, path, headers=telemetry.trace_headers(headers), body=body)
        except (OSError, TimeoutError) as e:
            raise GatewayUnavailable(f"the gateway at {self._http.origin} did not answer ({e!r})") from None

    async def list(self) -> list[ToolInfo]:
        reply = await self._send("GET", self._path)
        if reply.status >= 400:
            raise GatewayRefused(reply.status, reply.error())
        return reply.json()["tools"]

    async def call(self, name: str, arguments: Arguments | None = None) -> Any:
        arguments = arguments or {}
        reply = await self._send("POST", f"{self._path}/{quote(name, safe='')}", json.dumps(arguments).encode())
        if reply.status in TOOL_REFUSALS:
            error = reply.error()
            self.calls.append({"tool": name, "arguments": arguments, "error": error})
            raise ToolFailed(error)
        if reply.status >= 400:
            raise GatewayRefused(reply.status, reply.error())
        result = reply.json()["result"]
        self.calls.append({"tool": name, "arguments": arguments, "result": result})
        return result


class TurnTools:
    """What `async with turn.tools() as tools` gives: the role's tools, listed once as the block opens (so
    `tools.list()` is a plain call, as in the framework's loop), and `await tools.call(name, arguments)`."""

    def __init__(self, transport: Any, listed: list[ToolInfo]) -> None:
        self._transport, self._listed = transport, listed

    def list(self) -> list[ToolInfo]:
        return list(self._listed)

    async def call(self, name: str, arguments: Arguments | None = None) -> Any:
        return await self._transport.call(name, arguments)

    @property
    def calls(self) -> builtins.list[ToolCall]:  # (`list` is the method above, in this class)
        return self._transport.calls
