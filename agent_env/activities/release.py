"""Release a run at its end (done, failed or cancelled): its sandboxed instances retired, its sandboxes removed,
all else it holds on the gateway released."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity

from agent_env.activities.shared import HEARTBEAT_EVERY, Activities, keep_heartbeating
from agent_env.gateway.release import end_run, retire_instance
from agent_env.providers.apps import remove_sandboxes
from agent_env.providers.topologies import close_run_servers
from agent_env.workflows import contract


class ReleaseActivities(Activities):
    @activity.defn(name=contract.RELEASE_SANDBOXES.name)
    async def release_sandboxes(self, run_id: str, instances: list[str], sandboxes: bool = True) -> dict[str, Any]:
        """At the run's end (done, failed or cancelled): retire its sandboxed instances, remove its sandboxes
        (if it started any), and release all else it holds on the gateway (see `end_run`)."""
        beat = asyncio.create_task(keep_heartbeating(HEARTBEAT_EVERY))  # a dead worker is noticed in seconds
        try:
            gateway = await self._gateway()
            for instance in instances:
                await retire_instance(gateway, self.stores, run_id, instance)
            ended = await end_run(gateway, self.stores, run_id)
            servers = await close_run_servers(self.settings, self.stores, run_id)  # envs' own servers
            removed = await remove_sandboxes(self.settings, run_id) if sandboxes else []
        finally:
            beat.cancel()
        return {
            "instances": len(instances),
            "sandboxes": len(removed),
            **ended,
            **({"servers": servers} if servers else {}),
        }
