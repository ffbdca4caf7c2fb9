"""Delivering trigger hits from agents' calls to their runs, as Temporal updates.

A hit is written to the gateway's outbox before anything else, then sent with an update id, so a
crash or a resend never loses or doubles it (Temporal drops a repeated update id). A barrier waits
(bounded) for the run to have applied the hit's actions before the agent gets its answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

from agentenv.spec.world_run import HitAck, TriggerHit
from agentenv.stores.base import DocumentStore

log = logging.getLogger("agentenv.gateway")
OUTBOX = "outbox"


class Delivery:
    def __init__(self, store: DocumentStore, settings=None) -> None:
        self.store = store
        self.settings = settings
        self._client = None
        self._lock = asyncio.Lock()
        self._background: set[asyncio.Task] = set()

    async def _temporal(self):
        async with self._lock:
            if self._client is None:
                from agentenv.config import load_settings
                from agentenv.temporal.client import connect

                self._client = await connect(self.settings or load_settings(), start_server=False)
            return self._client

    async def send(self, run_id: str, hit: TriggerHit, barrier_s: float | None) -> HitAck | None:
        update_id = f"hit-{uuid.uuid4().hex}"
        self.store.put(OUTBOX, update_id, {"id": update_id, "run_id": run_id, "hit": hit.model_dump(mode="json")})
        task = asyncio.create_task(self._deliver(update_id, run_id, hit))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        if barrier_s:
            with contextlib.suppress(asyncio.TimeoutError):
                return await asyncio.wait_for(asyncio.shield(task), barrier_s)
        return None

    async def _deliver(self, update_id: str, run_id: str, hit: TriggerHit) -> HitAck | None:
        from temporalio.client import WorkflowUpdateFailedError
        from temporalio.service import RPCError

        delay = 0.2
        for _ in range(30):
            try:
                client = await self._temporal()
                handle = client.get_workflow_handle(run_id)
                ack = await handle.execute_update("trigger_hit", hit, id=update_id, result_type=HitAck)
                self.store.delete(OUTBOX, update_id)
                return ack
            except (WorkflowUpdateFailedError, RPCError) as e:
                if isinstance(e, RPCError) and "not found" not in str(e).lower() and "completed" not in str(e).lower():
                    log.warning("delivering %s to run %s failed (%s); retrying", hit.trigger, run_id, e)
                else:  # the run is over or gone: nothing will ever take it
                    self.store.delete(OUTBOX, update_id)
                    return None
            except Exception as e:  # noqa: BLE001 - keep trying: Temporal may be restarting
                log.warning("delivering %s to run %s failed (%s); retrying", hit.trigger, run_id, e)
                self._client = None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
        return None  # still in the outbox: sent again when the gateway restarts

    def resend_pending(self) -> int:
        pending = self.store.query(OUTBOX)
        for doc in pending:
            hit = TriggerHit.model_validate(doc["hit"])
            task = asyncio.create_task(self._deliver(doc["id"], doc["run_id"], hit))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        return len(pending)

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
