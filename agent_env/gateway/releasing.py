"""What the gateway gives back: a run's end (its tokens end, its instances close, its sessions end, its hosted
agents go), idle instances closed, expired ones deleted, so nothing grows per finished run."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime

from agent_env.agents.host import AGENTS
from agent_env.gateway.instances import Instances
from agent_env.gateway.spec import InstanceSpec
from agent_env.gateway.state import COLLECTION
from agent_env.gateway_client import wire

EXPIRY_SWEEP_S = 60.0  # how often instances past their `expires_at` are looked for
EXPIRY_PAGE = 500  # instances the sweep reads at a time


class Releasing(Instances):
    async def end_run(self, run_id: str) -> wire.RunEnded:
        """The run is over: its agents' role tokens stop working (recorded with each instance, so a restarted
        gateway knows it too), its instances close (kept, so they can still be read; reopened on demand), its
        agents' MCP sessions end, its hosted agents are deleted. Idempotent."""
        docs = self.store.query(COLLECTION, where={"run_id": run_id})
        instances = [doc["id"] for doc in docs]
        self._mark_ended(docs, datetime.now(UTC))
        sessions = 0
        for instance_id in instances:
            with contextlib.suppress(Exception):  # a broken app must not keep the rest of the run open
                await self._unload(instance_id)
            sessions += await self._end_sessions(instance_id)

        agents = [a["id"] for a in self.store.query(AGENTS, where={"run_id": run_id})]
        for agent_id in agents:
            await self.agents.delete(agent_id)
        self.agents.end_reviews(run_id)  # nobody waits for them any more
        return {"instances": instances, "agents": agents, "sessions": sessions}

    def _mark_ended(self, docs: list[wire.JsonObject], when: datetime) -> None:
        """Record that the instances' run ended (the first time only): no request of its agents is served after."""
        for doc in docs:
            inst = self._instances.get(doc["id"])
            spec = inst.spec if inst is not None else InstanceSpec.model_validate(doc)
            if spec.ended_at is None:
                spec.ended_at = when
                self.store.put(COLLECTION, spec.id, spec.model_dump(mode="json"))

    async def close_idle(self, now: float | None = None) -> list[str]:
        """Close instances unused for `idle_close_s` and with no call in flight."""
        if self.idle_close_s is None:
            return []
        now = time.monotonic() if now is None else now
        idle = [i for i, inst in self._instances.items() if not inst.busy and now - inst.last_used >= self.idle_close_s]
        for instance_id in idle:
            with contextlib.suppress(Exception):
                await self._unload(instance_id)
        return idle

    async def delete_expired(self, now: datetime | None = None) -> list[str]:
        """Delete instances past their `expires_at` (what a trainer that died could not release)."""
        now = now or datetime.now(UTC)
        expired, after = [], None
        while True:  # those with an expiry first (indexed): it stops at the first without, not at the end
            page = self.store.page(COLLECTION, order_by="expires_at", descending=True, limit=EXPIRY_PAGE, after=after)
            dated = [doc for doc in page.items if doc.get("expires_at")]
            expired += [doc["id"] for doc in dated if _aware(datetime.fromisoformat(doc["expires_at"])) <= now]
            if page.next is None or len(dated) < len(page.items):
                break
            after = page.next
        for instance_id in expired:
            await self.delete(instance_id)
        return expired

    async def run_idle_closer(self) -> None:
        """Close idle instances and delete expired ones now and then, for the gateway's life (started by its
        web app)."""
        every = EXPIRY_SWEEP_S if self.idle_close_s is None else max(1.0, min(EXPIRY_SWEEP_S, self.idle_close_s / 4))
        while True:
            await asyncio.sleep(every)
            await self.close_idle()
            with contextlib.suppress(Exception):  # a failing sweep is tried again at the next
                await self.delete_expired()


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)  # a time without a zone is UTC
