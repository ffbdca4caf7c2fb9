"""What the gateway holds, declared once for the classes that each do one of its jobs (`auth`: tokens and who is
calling; `instances`: creating, opening and deleting instances; `releasing`: what a run's end, idleness and
expiry give back; `world`: roles and the run's world pushed in; `calls`: tool calls and MCP). `service.Gateway`
is all of them, and its `__init__` sets what is declared here."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import mcp.types as types

    from agent_env.agents.host import AgentHost
    from agent_env.envs.mcp import ChangeChannel, McpEndpoint
    from agent_env.gateway import trajectory
    from agent_env.gateway.callers import CallerLimits
    from agent_env.gateway.delivery import Delivery
    from agent_env.gateway.env_instance import EnvInstance
    from agent_env.gateway.metrics import GatewayMetrics
    from agent_env.gateway.storage import Storage
    from agent_env.stores.local import SqliteDocumentStore

COLLECTION = "gateway_instances"
WORLDS = "gateway_worlds"


class GatewayState:
    root: Path
    idle_close_s: float | None
    key: bytes
    admin_token: str
    store: SqliteDocumentStore
    max_body_bytes: int
    _instances: dict[str, EnvInstance]
    _tokens: dict[str, dict[bytes, str]]  # instance -> {digest of a token: agent}
    _lookup_key: bytes  # looking tokens up by a keyed digest: no timing tells a token
    _channels: dict[str, ChangeChannel]
    _listings: dict[tuple[str, str], list[types.Tool]]
    _forking: set[str]  # new instances being forked now (a concurrent retry is told to wait)
    trajectory: trajectory.TrajectoryWriter
    storage: Storage
    delivery: Delivery
    mcp: McpEndpoint
    limits: CallerLimits
    metrics: GatewayMetrics
    agents: AgentHost

    async def get(self, instance_id: str) -> EnvInstance:
        """The open instance (opened from the store if need be); `instances.Instances` answers it."""
        raise NotImplementedError
