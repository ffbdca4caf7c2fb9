"""How a worker stops without losing steps: it drains.

Temporal's worker does the draining: once shut down it polls no more, gives running activities a grace period
(`graceful_shutdown_timeout`), then cancels those still running and reports them to the server as failed by
the worker's shutdown, so the server retries them on another worker at once (after the retry policy's first
interval), not after a heartbeat timeout. Every activity is idempotent (steps carry idempotency keys), so
running one again is safe; the retry counts as one of the step's attempts.

This interceptor counts what is running and what was handed back, so a stopping worker can say what it waits
for and what it did.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor


class Draining(Interceptor):
    """One worker's running activities, and how long its shutdown lets them finish (`grace`)."""

    def __init__(self, grace: timedelta) -> None:
        self.grace = grace
        self.running = 0
        self.finished = 0  # activities that ended (any way) after the drain began
        self.handed_back = 0
        self.draining = False

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Counted(next, self)

    def begin(self) -> str:
        """Mark the drain's start; what the worker is waiting for, in a line."""
        self.draining = True
        seconds = f"{self.grace.total_seconds():g} s"
        if not self.running:
            return "draining: no activity running"
        plural = "activity" if self.running == 1 else "activities"
        return f"draining: {self.running} {plural} running, up to {seconds} (again to stop at once)"

    def outcome(self) -> str:
        """What the drain did, in a line."""
        if self.handed_back:
            return (
                f"drained: {self.finished - self.handed_back} finished, {self.handed_back} handed back to other workers"
            )
        return f"drained: {self.finished} finished" if self.finished else "drained"


class _Counted(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, drain: Draining) -> None:
        super().__init__(next)
        self.drain = drain

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        self.drain.running += 1
        try:
            return await super().execute_activity(input)
        except asyncio.CancelledError:
            details = activity.cancellation_details()
            if details is not None and details.worker_shutdown:
                self.drain.handed_back += 1
            raise
        finally:
            self.drain.running -= 1
            if self.drain.draining:
                self.drain.finished += 1
