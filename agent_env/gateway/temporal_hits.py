"""Trigger hits to runs as Temporal updates: the sender the gateway's delivery uses (`gateway/delivery.py` keeps
the outbox, the retries and the parking; this says what Temporal answered, in the delivery's terms)."""

from __future__ import annotations

import asyncio

from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError

from agent_env.config import Settings, load_settings
from agent_env.gateway.delivery import HitRefused, RunGone
from agent_env.spec.world_state import HitAck, TriggerHit
from agent_env.temporal_client.client import connect


class TemporalHits:
    """Sends a hit as the run's `trigger_hit` update, connecting (sealed, as every client does) when first needed
    and again after a failure: Temporal may be restarting."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings
        self._client: Client | None = None
        self._lock = asyncio.Lock()

    async def _temporal(self) -> Client:
        async with self._lock:
            if self._client is None:
                self._client = await connect(self.settings or load_settings(), start_server=False)
            return self._client

    async def __call__(self, run_id: str, update_id: str, hit: TriggerHit) -> HitAck:
        try:
            handle = (await self._temporal()).get_workflow_handle(run_id)
            ack: HitAck = await handle.execute_update("trigger_hit", hit, id=update_id, result_type=HitAck)
            return ack
        except WorkflowUpdateFailedError as e:  # refused by the run's validator (or failed in it)
            raise HitRefused(_cause(e)) from e
        except RPCError as e:
            if "not found" in str(e).lower() or "completed" in str(e).lower():
                raise RunGone(str(e)) from e
            raise
        except Exception:
            self._client = None  # reconnect on the next attempt
            raise


def _cause(e: BaseException) -> str:
    """The run's own words (a validator's message), not the client's wrapper."""
    cause = getattr(e, "cause", None) or e.__cause__
    return str(getattr(cause, "message", None) or cause or e)[:2000]
