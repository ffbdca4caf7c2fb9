"""`sleep`: wait a while (real time), heartbeating, e.g. to let something settle."""

from __future__ import annotations

import asyncio
import time

from pydantic import Field

from agent_env.gateway_client.wire import JsonObject
from agent_env.steps import StepConfig, StepContext, step_type


class SleepConfig(StepConfig):
    seconds: float = Field(ge=0, le=86400)


@step_type("sleep", config=SleepConfig, timeout="25h", retries=3)
async def sleep(ctx: StepContext, config: SleepConfig) -> JsonObject:
    """Wait the given number of real seconds."""
    deadline = time.monotonic() + config.seconds
    while (left := deadline - time.monotonic()) > 0:
        ctx.heartbeat(left)
        await asyncio.sleep(min(left, 0.5))
    return {"slept": config.seconds}
