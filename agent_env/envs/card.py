"""The environment card (`/.well-known/agent-env.json`) in the open agent-env protocol v1 shape.

Field names are the wire keys (camelCase, except `children_environments`). Every key is always
written, nulls included: `capabilities.operations: null` means "all three data operations" to
older readers while `[]` means none, so nulls must not be dropped.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

PROTOCOL_VERSION = "1.0"
CARD_PATH = "/.well-known/agent-env.json"
RPC_PATH = "/agentenv"
OPERATIONS = ["data/reset", "data/add", "data/get"]
META_HIDDEN_BY_DEFAULT = "agentenv.io/hiddenByDefault"


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Interface(_Wire):
    url: str
    transport: str


class CardTool(_Wire):
    name: str
    description: str | None = None
    inputSchema: dict[str, Any] | None = None  # noqa: N815 - wire key


class CardExtension(_Wire):
    uri: str
    description: str | None = None
    params: dict[str, Any] | None = None
    required: bool | None = None


class CardCapabilities(_Wire):
    tools: list[CardTool] | None = None
    extensions: list[CardExtension] | None = None
    operations: list[str] | None = None


class EnvironmentCard(_Wire):
    name: str
    protocolVersion: str = PROTOCOL_VERSION  # noqa: N815
    url: str = RPC_PATH
    preferredTransport: str = "JSONRPC"  # noqa: N815
    additionalInterfaces: list[Interface] = Field(  # noqa: N815
        default_factory=lambda: [Interface(url="/mcp", transport="mcp")]
    )
    capabilities: CardCapabilities = Field(default_factory=CardCapabilities)
    children_environments: list[EnvironmentCard] | None = None

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
