"""Pacing a paced clock: renew the clock's lease at the gateway, then wait a fraction of a second precisely (the
server fires no timer sooner than about a second)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from temporalio import activity

from agent_env.activities.shared import Activities
from agent_env.activities.world import push_to
from agent_env.spec.world_state import WorldPush
from agent_env.workflows import contract
from agent_env.workflows.contract import Paced


class PacingActivities(Activities):
    @activity.defn(name=contract.PACE.name)
    async def pace(self, seconds: float, pushes: list[tuple[str, WorldPush]]) -> Paced:
        """Renew the clock's lease at the gateway, then wait `seconds` precisely (no sub-second timers
        exist on the server). Returns the real time at the end (for the workflow's clock) and hits."""
        hits = await push_to(await self._gateway(), pushes) if pushes else []
        if seconds > 0:
            await asyncio.sleep(seconds)
        return Paced(real=datetime.now(UTC).isoformat(), hits=hits)
