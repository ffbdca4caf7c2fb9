"""Record a run: its state upserted in the document store, so runs stay listable without Temporal and after its
retention."""

from __future__ import annotations

import asyncio

from temporalio import activity

from agent_env.activities.shared import Activities
from agent_env.gateway.release import end_run
from agent_env.spec.run import RunState
from agent_env.workflows import contract


class RecordActivities(Activities):
    @activity.defn(name=contract.RECORD_RUN.name)
    async def record_run(self, state: RunState, release: list[str] | None) -> None:
        """Upsert the run's record: runs stay listable without Temporal and after its retention. With `release`
        (the run's id), also release what the run holds on the gateway, meanwhile (it started no sandbox: see
        `end_run`)."""
        if not release:
            await self._record(state)
            return
        # Both at once (the record is written in a thread, the release is the gateway's): either may be
        # retried, as both are idempotent.
        await asyncio.gather(self._record(state), self._release(release[0]))

    async def _record(self, state: RunState) -> None:
        await self.stores.aio.documents.put("runs", state.run_id, state.model_dump(mode="json"))

    async def _release(self, run_id: str) -> None:
        await end_run(await self._gateway(), self.stores, run_id)
