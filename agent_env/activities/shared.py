"""What every activity of a worker shares: its settings, its stores (opened once), its gateway client, heartbeats,
and how a failure is told to the workflow (retried, or a verdict that ends the step)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from agent_env.config import Settings
from agent_env.spec.world_state import clip_fields
from agent_env.steps import StepContext, StepFailed
from agent_env.stores import Stores, open_stores
from agent_env.workflows.contract import Hit

if TYPE_CHECKING:
    from agent_env.gateway_client import GatewayClient

HEARTBEAT_EVERY = 5.0  # seconds, for activities that wait on others (an agent's turn)


class Activities:
    """Bound to one worker's settings; opens the stores once and reuses them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._stores: Stores | None = None

    @property
    def stores(self) -> Stores:
        if self._stores is None:
            self._stores = open_stores(self.settings)
        return self._stores

    async def _gateway(self) -> GatewayClient:
        return await StepContext(run_id="", task_id="", step_id="", attempt=1, settings=self.settings).gateway()


def clipped_hits(hits: list[Hit]) -> list[Hit]:
    """Trigger hits with each field of their match bounded: they enter history (whatever agents sent)."""
    return [{**h, "match": clip_fields(h.get("match") or {})} for h in hits]


def step_failed(e: StepFailed) -> ApplicationError:
    """A step's own verdict. One that will not be retried is benign to Temporal: the run reports it, so
    workers do not log it as a warning with a traceback (it would land on the CLI user's terminal)."""
    return ApplicationError(
        str(e),
        type="StepFailed",
        non_retryable=not e.retryable,
        category=ApplicationErrorCategory.UNSPECIFIED if e.retryable else ApplicationErrorCategory.BENIGN,
    )


def fatal(message: str, kind: str) -> ApplicationError:
    return ApplicationError(message, type=kind, non_retryable=True)


async def keep_heartbeating(every: float) -> None:
    """Heartbeats let Temporal notice a dead worker quickly and deliver cancellation to the step."""
    with contextlib.suppress(asyncio.CancelledError):
        while True:
            activity.heartbeat()
            await asyncio.sleep(every)
