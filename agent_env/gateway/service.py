"""The gateway's state and logic, one class of its jobs at a time (state.py names them): `Gateway` is what the
HTTP surface serves. Its parts: `callers` (who calls, their limits, refusals), `auth`, `instances`,
`releasing`, `world`, `calls`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_env.agents.host import AgentHost
from agent_env.envs.mcp import McpEndpoint
from agent_env.gateway import tokens, trajectory
from agent_env.gateway.callers import Caller, CallerLimits, GatewayError
from agent_env.gateway.calls import Calls
from agent_env.gateway.delivery import Delivery
from agent_env.gateway.mcp_tools import GET_TIME
from agent_env.gateway.metrics import GatewayMetrics
from agent_env.gateway.state import COLLECTION
from agent_env.gateway.storage import Storage, StorageLimits
from agent_env.gateway_client.configured import public_base
from agent_env.stores.local import SqliteDocumentStore

if TYPE_CHECKING:
    from agent_env.config import Settings


class Gateway(Calls):
    def __init__(
        self,
        root: Path,
        *,
        max_body_bytes: int = 16 * 1024 * 1024,
        settings: Settings | None = None,
        max_calls_per_agent: int = 32,
        max_sessions_per_agent: int = 16,
        max_mcp_requests_per_agent: int | None = None,
        idle_close_s: float | None = 600.0,
        key: bytes | None = None,
        max_app_data_mib: int = 256,
        max_trajectory_mib: int = 512,
        min_free_disk_mib: int = 1024,
    ) -> None:
        """`idle_close_s`: an open instance no one called for this long is closed (its apps, processes and
        trajectory file); its next request reopens it from the store. None: never. The storage budgets
        (`max_app_data_mib`, `max_trajectory_mib` per instance, `min_free_disk_mib` for the gateway's disk;
        0: none) are described in storage.py."""
        self.root = root
        self.idle_close_s = idle_close_s
        root.mkdir(parents=True, exist_ok=True)
        self.key = key if key is not None else tokens.load_or_create_key(root / "key")  # a pool's: shared
        self.admin_token = tokens.admin_token(self.key)
        self.store = SqliteDocumentStore(root / "instances.sqlite")
        self.max_body_bytes = max_body_bytes
        self._instances = {}
        self._tokens = {}
        self._lookup_key = os.urandom(32)
        self._channels = {}
        self._listings = {}
        self._forking = set()
        self.trajectory = trajectory.TrajectoryWriter()
        self.storage = Storage(root, StorageLimits.mib(max_app_data_mib, max_trajectory_mib, min_free_disk_mib))
        self.delivery = Delivery(self.store, settings)
        self.mcp = McpEndpoint(self, "agentenv-gateway", max_body_bytes=max_body_bytes)
        # Per agent: its calls in flight, its sessions, and requests enough for both (one stream per session).
        self.limits = CallerLimits(
            max_calls_per_agent,
            max_sessions_per_agent,
            max_mcp_requests_per_agent or max_calls_per_agent + max_sessions_per_agent,
        )
        self.metrics = GatewayMetrics(
            instances=lambda: len(self._instances),
            sessions=lambda: len(self.mcp.sessions),
            agents=lambda: len(self.agents.list()),
        )
        self.limits.on_refusal = self._over_limit

        self.agents = AgentHost(self.store, public_base(settings))  # cards name the configured URL, not Host
        self.agents.secrets_from = settings

    async def shutdown(self) -> None:
        """Close every open instance (stopping apps that run in processes of their own)."""
        await self.delivery.close()
        await self.agents.close()
        for instance_id in list(self._instances):
            await self._unload(instance_id)

    def _over_limit(self, via: str | None) -> None:
        self.metrics.refused("rate_limit")
        if via is not None:
            self.metrics.counted(via, "refused")

    def readiness(self) -> str | None:
        """None when ready to serve; else why not (for `/readyz`)."""
        try:
            self.store.get(COLLECTION, "")  # the instance store answers
        except Exception as e:  # noqa: BLE001 - any failure means not ready; the reason says which
            return f"the instance store does not answer: {type(e).__name__}: {e}"
        if failure := self.trajectory.health():
            lost = {"trajectory": failure}
            return f"lost data: {lost}"
        if low := self.storage.floor.low(fresh=True):
            return f"low disk: {low}"
        return None

    def health(self) -> dict[str, Any] | None:
        """None when all is well; else what is wrong: a trajectory writer that lost entries, a disk below the
        gateway's free-space floor (writes are refused)."""
        problems: dict[str, Any] = {}
        if failure := self.trajectory.health():
            problems["trajectory"] = failure
        if low := self.storage.floor.low(fresh=True):
            problems["disk"] = low
        return problems or None

    def close(self) -> None:
        self.trajectory.close()
        self.store.close()


__all__ = ["GET_TIME", "Caller", "Gateway", "GatewayError"]
