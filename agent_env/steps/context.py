"""What a step sees when it runs (`StepContext`): who it is, where it may keep files, the stores, the gateway,
and a heartbeat. Built by the activity that runs the step; planning never needs it (it sees `PlanContext`),
so it lives here, above the gateway, and `agent_env.step_types` below planning does not reach the gateway.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from agent_env.gateway.embedded import routed
from agent_env.stores import Stores, open_stores

if TYPE_CHECKING:
    from agent_env.config import Settings
    from agent_env.gateway_client import GatewayClient


@dataclass
class StepContext:
    """What a step sees: who it is, where it may keep files, the stores, and a heartbeat."""

    run_id: str
    task_id: str
    step_id: str
    attempt: int
    settings: Settings
    heartbeat: Callable[..., None] = lambda *details: None
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("agent_env.steps"))
    _stores: Stores | None = None

    @property
    def idempotency_key(self) -> str:
        """Stable across retries of this step in this run: key every external effect with it."""
        return f"{self.run_id}/{self.step_id}"

    @cached_property
    def work_dir(self) -> Path:
        """A folder for this run's files (shared by its steps), kept under the state directory."""
        path = self.settings.state_dir / "runs" / self.run_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def stores(self) -> Stores:
        if self._stores is None:
            self._stores = open_stores(self.settings)
        return self._stores

    async def gateway(self) -> GatewayClient:
        """The gateway's admin client (starting the embedded gateway if this install uses one)."""
        key = (str(self.settings.state_dir), tuple(self.settings.gateway.urls()))
        client = _GATEWAYS.get(key)
        if client is None:
            # instances on servers of their own (topologies other than `gateway`) are reached where they are served
            stores = await asyncio.to_thread(open_stores, self.settings)
            client = _GATEWAYS[key] = await asyncio.to_thread(routed, self.settings, stores)
        return client


_GATEWAYS: dict[tuple[str, tuple[str, ...]], GatewayClient] = {}  # one client per worker process
