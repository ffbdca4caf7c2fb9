"""Delivering trigger hits from agents' calls to their runs, as Temporal updates.

A hit is written to the gateway's outbox before anything else, then sent with an update id, so a
crash or a resend never loses or doubles it (Temporal drops a repeated update id). A barrier waits
(bounded) for the run to have applied the hit's actions before the agent gets its answer.

A hit the run refuses (its validator: too big, not this run's trigger or instance) or that keeps failing
is a poison hit: it is *parked* in the outbox with its error (`parked`, listed by `Delivery.parked()`), never
retried forever and never dropped silently. Matches are clipped before anything else, so whatever an agent
sends, a hit fits in history.

How a hit reaches its run is the sender's (`HitSender`): by default Temporal's (`temporal_hits.TemporalHits`, which
connects as every client does, through `agent_env.temporal_client`); a test or another builder may pass its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from agent_env.spec.times import utc_now_iso
from agent_env.spec.world_state import HitAck, TriggerHit, clip_fields
from agent_env.stores.base import Document, DocumentStore

if TYPE_CHECKING:
    from agent_env.config import Settings

log = logging.getLogger("agent_env.gateway")
OUTBOX = "outbox"
ATTEMPTS = 30  # sends of one hit (~2.5 min with backoff) before it is parked as failing

HitSender = Callable[[str, str, TriggerHit], Awaitable[HitAck]]
"""Sends a hit to its run (run id, update id, hit), answering the run's ack. Raises `HitRefused` when the run
refuses it, `RunGone` when the run is over or gone; any other error is retried."""


class HitRefused(Exception):
    """The run refused the hit (its validator): sending it again cannot help. The message is the run's."""


class RunGone(Exception):
    """The run is over or gone: nothing will ever take the hit."""


class Delivery:
    def __init__(self, store: DocumentStore, settings: Settings | None = None, sender: HitSender | None = None) -> None:
        self.store = store
        self.settings = settings
        self._sender = sender
        self._background: set[asyncio.Task[HitAck | None]] = set()

    def _send_update(self) -> HitSender:
        if self._sender is None:
            from agent_env.gateway.temporal_hits import (
                TemporalHits,
            )  # (temporalio, and it imports this module's errors)

            self._sender = TemporalHits(self.settings)
        return self._sender

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
        delay = 0.2
        error = "not sent"
        for _ in range(ATTEMPTS):
            try:
                ack = await self._send_update()(run_id, update_id, hit)
                self.store.delete(OUTBOX, update_id)
                return ack
            except HitRefused as e:
                self._park(update_id, run_id, hit, f"the run refused it: {e}")
                return None
            except RunGone:
                self.store.delete(OUTBOX, update_id)  # the run is over or gone: nothing will ever take it
                return None
            except Exception as e:  # noqa: BLE001 - keep trying: Temporal may be restarting
                error = f"{type(e).__name__}: {e}"
                log.warning("delivering %s to run %s failed (%s); retrying", hit.trigger, run_id, e)
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

    def parked(self, run_id: str | None = None) -> list[Document]:
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
