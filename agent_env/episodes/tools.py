"""A trainer's tools over the gateway's REST surface: the fastest transport it offers.

A trainer calls many tools per turn and plays many turns: its `Episodes` connection keeps one routed client
(`gateway.embedded.routed`) across turns and episodes, and each call is one small POST on its kept-alive
connection (no MCP session to open, no JSON-RPC envelope) to whatever serves the instance: the install's
gateway, or the instance's own server (a topology other than `gateway`). The role token travels only there.
`list`/`call` behave as the MCP tools do (`agent_env.agents.sdk.Tools`): a tool's JSON result, or `ToolFailed`
with its error text.
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from agent_env.agents.sdk import ToolFailed
from agent_env.gateway_client import GatewayRefused

if TYPE_CHECKING:
    from agent_env.gateway_client import GatewayClient

# What a tool call's refusal looks like over REST: unknown tool, not the role's, bad arguments or its own error.
TOOL_REFUSALS = (403, 404, 422)
Arguments = dict[str, Any]  # a tool's arguments: the JSON object its input schema describes


class ToolInfo(TypedDict):
    """A tool of the role, as the gateway lists it (and MCP's tools/list)."""

    name: str
    description: str
    inputSchema: dict[str, object]  # a JSON Schema


class ToolCall(TypedDict):
    """A call the trainer's agent made this turn: its tool, its arguments, and its result or error."""

    tool: str
    arguments: Arguments
    result: NotRequired[Any]
    error: NotRequired[str]


class RestTools:
    """One agent's tools on one instance, through the routed client, with its role token."""

    def __init__(self, gateway: GatewayClient, instance: str, token: str | None) -> None:
        self._gateway, self._instance, self._token = gateway, instance, token or ""
        self.calls: list[ToolCall] = []

    async def list(self) -> list[ToolInfo]:
        tools: list[ToolInfo] = await self._gateway.list_tools(self._instance, self._token)  # type: ignore[assignment]
        return tools

    async def call(self, name: str, arguments: Arguments | None = None) -> Any:
        arguments = arguments or {}
        try:
            result = await self._gateway.call_tool(self._instance, self._token, name, arguments)
        except GatewayRefused as e:
            if e.status not in TOOL_REFUSALS:
                raise
            self.calls.append({"tool": name, "arguments": arguments, "error": e.problem})
            raise ToolFailed(e.problem) from None
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
