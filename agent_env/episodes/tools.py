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
from typing import Any
from urllib.parse import quote, urlsplit

from agent_env import telemetry
from agent_env.agents.sdk import ToolFailed
from agent_env.gateway_client import GatewayRefused, GatewayUnavailable
from agent_env.keepalive import KeepAliveClient, Reply

# What a tool call's refusal looks like over REST: unknown tool, not the role's, bad arguments or its own error.
TOOL_REFUSALS = (403, 404, 422)
MAX_ANSWER_BYTES = 64 * 1024 * 1024


def tools_path(mcp_url: str) -> tuple[str, str]:
    """`<gateway>/envs/<instance>/mcp` -> (`<gateway>` origin, `/envs/<instance>/tools`, the REST path)."""
    parts = urlsplit(mcp_url)
    path, sep, _ = parts.path.rpartition("/mcp")
    if not sep or parts.scheme not in ("http", "https"):
        raise ValueError(f"not an instance's MCP URL: {mcp_url!r}")
    return f"{parts.scheme}://{parts.netloc}", path + "/tools"


def client_for(clients: dict[str, KeepAliveClient], origin: str) -> KeepAliveClient:
    if origin not in clients:
        from agent_env import tls

        clients[origin] = KeepAliveClient(origin, ssl_context=tls.context(), max_body=MAX_ANSWER_BYTES)
    return clients[origin]


class RestTools:
    def __init__(self, http: KeepAliveClient, path: str, token: str | None) -> None:
        self._http, self._path = http, path
        self._headers = {"authorization": f"Bearer {token}"} if token else {}
        self.calls: list[dict[str, Any]] = []

    async def _send(self, method: str, path: str, body: bytes = b"") -> Reply:
        headers = {**self._headers, "content-type": "application/json"} if body else self._headers
        try:
            return await self._http.request(method, path, headers=telemetry.trace_headers(headers), body=body)
        except (OSError, TimeoutError) as e:
            raise GatewayUnavailable(f"the gateway at {self._http.origin} did not answer ({e!r})") from None

    async def list(self) -> list[dict[str, Any]]:
        reply = await self._send("GET", self._path)
        if reply.status >= 400:
            raise GatewayRefused(reply.status, reply.error())
        return reply.json()["tools"]

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
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

    def __init__(self, transport: Any, listed: list[dict[str, Any]]) -> None:
        self._transport, self._listed = transport, listed

    def list(self) -> list[dict[str, Any]]:
        return list(self._listed)

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        return await self._transport.call(name, arguments)

    @property
    def calls(self) -> builtins.list[dict[str, Any]]:  # (`list` is the method above, in this class)
        return self._transport.calls
