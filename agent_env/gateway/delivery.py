"""Delivering trigger hits from agents' calls to their runs, as Temporal updates.

A hit is written to the gateway's outbox before anything else, then sent with an update id, so a
crash or a resend never loses or doubles it (Temporal drops a repeated update id). A barrier waits
(bounded) for the run to have applied the hit's actions before the agent gets its answer.

A hit the run refuses (its validator: too big, not this run's trigger or instance) or that keeps failing
is a poison hit: it is *parked* in the outbox with its error (`parked`, listed by `Delivery.parked()`), never
retried forever and never dropped silently. Matches are clipped before anything else, so whatever an agent
sends, a hit fits in history.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

from agent_env.spec.times import utc_now_iso
from agent_env.spec.world_state import HitAck, TriggerHit, clip_fields
from agent_env.stores.base import DocumentStore

log = logging.getLogger("agent_env.gateway")
OUTBOX = "outbox"
ATTEMPTS = 30  # sends of one hit (~2.5 min with backoff) before it is parked as failing


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
                from agent_env.config import load_settings
                from agent_env.temporal.client import connect

                self._client = await connect(self.settings or load_settings(), start_server=False)
            return self._client

    async def send(self, run_id: str, hit: TriggerHit, barrier_s: float | None) -> HitAck | None:
        update_id = f"hit-{uuid.uuid4().hex}"
        hit = hit.model_copy(update={"match": clip_fields(hit.match)})  # arguments, results: bounded previews
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
        error = "not sent"
        for _ in range(ATTEMPTS):
            try:
                client = await self._temporal()
                handle = client.get_workflow_handle(run_id)
                ack = await handle.execute_update("trigger_hit", hit, id=update_id, result_type=HitAck)
                self.store.delete(OUTBOX, update_id)
                return ack
            except WorkflowUpdateFailedError as e:  # refused by the run's validator (or failed in it)
                self._park(update_id, run_id, hit, f"the run refused it: {_cause(e)}")
                return None
            except RPCError as e:
                if "not found" in str(e).lower() or "completed" in str(e).lower():
                    self.store.delete(OUTBOX, update_id)  # the run is over or gone: nothing will ever take it
                    return None
                error = str(e)
                log.warning("delivering %s to run %s failed (%s); retrying", hit.trigger, run_id, e)
            except Exception as e:  # noqa: BLE001 - keep trying: Temporal may be restarting
                error = f"{type(e).__name__}: {e}"
                log.warning("delivering %s to run %s failed (%s); retrying", hit.trigger, run_id, e)
                self._client = None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
        self._park(update_id, run_id, hit, f"failed {ATTEMPTS} times, last: {error}")
        return None

    def _park(self, update_id: str, run_id: str, hit: TriggerHit, error: str) -> None:
        """Keep a poison hit where people look (the outbox, with its error), and stop sending it."""
        log.error("trigger hit %s of run %s parked: %s", hit.trigger, run_id, error)
        self.store.put(
            OUTBOX,
            update_id,
            {
                "id": update_id,
                "run_id": run_id,
                "hit": hit.model_dump(mode="json"),
                "parked": {"error": error[:2000], "at": utc_now_iso()},
            },
        )

    def parked(self, run_id: str | None = None) -> list[dict]:
        """Hits parked with an error (for a run, or all): what a listing of the outbox shows."""
        return [d for d in self.store.query(OUTBOX) if d.get("parked") and (run_id is None or d["run_id"] == run_id)]

    def resend_pending(self) -> int:
        pending = [d for d in self.store.query(OUTBOX) if not d.get("parked")]  # parked ones wait for a person
        for doc in pending:
            hit = TriggerHit.model_validate(doc["hit"])
            task = asyncio.create_task(self._deliver(doc["id"], doc["run_id"], hit))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        return len(pending)

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()


def _cause(e: BaseException) -> str:
    """The run's own words (a validator's message), not the client's wrapper."""
    cause = getattr(e, "cause", None) or e.__cause__
    return str(getattr(cause, "message", None) or cause or e)[:2000]
