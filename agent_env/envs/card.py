"""The environment card (`/.well-known/agent-env.json`) we serve, built from the open agent-env protocol's own
models (`agentenv_protocol.types`): `agent-env env serve` and the gateway fill it in the same way.

Every key is always written, nulls included: `capabilities.operations: null` means "all three data
operations" to older readers while `[]` means none, so nulls must not be dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentenv_protocol import (
    HIDDEN_BY_DEFAULT_META_KEY,
    MCP_PATH,
    MCP_TRANSPORT,
    METHOD_ADD,
    METHOD_GET,
    METHOD_RESET,
    RPC_PATH,
    WELL_KNOWN_PATH,
    EnvironmentCapabilities,
    EnvironmentCard,
    EnvironmentExtension,
    EnvironmentInterface,
    EnvironmentTool,
)

__all__ = [
    "HIDDEN_BY_DEFAULT_META_KEY",
    "OPERATIONS",
    "RPC_PATH",
    "WELL_KNOWN_PATH",
    "EnvironmentCapabilities",
    "EnvironmentCard",
    "EnvironmentExtension",
    "EnvironmentTool",
    "environment_card",
    "wire",
]

OPERATIONS = [METHOD_RESET, METHOD_ADD, METHOD_GET]  # the data plane's methods, all of which we serve


def environment_card(
    name: str,
    *,
    tools: Iterable[EnvironmentTool],
    operations: Iterable[str],
    children: Iterable[EnvironmentCard] | None = None,
    extensions: Iterable[EnvironmentExtension] = (),
) -> EnvironmentCard:
    """An environment's card: its tools, its data operations, its MCP endpoint (at MCP_PATH), the protocol
    extensions it serves and, for a composed environment, its apps' cards (`children`)."""
    return EnvironmentCard(
        name=name,
        additionalInterfaces=[EnvironmentInterface(url=MCP_PATH, transport=MCP_TRANSPORT)],
        capabilities=EnvironmentCapabilities(
            tools=list(tools), extensions=list(extensions), operations=list(operations)
        ),
        children_environments=None if children is None else list(children),
    )


def wire(card: EnvironmentCard) -> dict[str, Any]:
    """The card as sent: every key, nulls included (see above)."""
    result: dict[str, Any] = card.model_dump(mode="json")
    return result
