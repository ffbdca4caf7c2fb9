"""Step types for agent-env's tests, loaded through the `agent_env.task_steps` entry-point group."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from agent_env.steps import StepConfig, StepContext, StepFailed, step_type
from agentenv_teststeps.scratchpad import Scratchpad


class EchoConfig(StepConfig):
    value: Any = None


@step_type("echo", config=EchoConfig, local=True, retries=0)
async def echo(ctx: StepContext, config: EchoConfig) -> dict:
    """Output the configured value."""
    return {"value": config.value}


class FlakyConfig(StepConfig):
    fail_times: int


@step_type("flaky", config=FlakyConfig, retries=5)
async def flaky(ctx: StepContext, config: FlakyConfig) -> dict:
    """Fail (retryably) on the first `fail_times` attempts."""
    if ctx.attempt <= config.fail_times:
        raise RuntimeError(f"transient failure on attempt {ctx.attempt}")
    return {"attempt": ctx.attempt}


class FailConfig(StepConfig):
    message: str = "deliberate failure"
    retryable: bool = False


@step_type("fail", config=FailConfig, retries=1)
async def fail(ctx: StepContext, config: FailConfig) -> dict:
    """Always fail."""
    raise StepFailed(config.message, retryable=config.retryable)


class SlowWriteConfig(StepConfig):
    key: str
    text: str
    seconds: float
    write_first: bool = False


@step_type("slow_write", config=SlowWriteConfig, heartbeat_timeout="2s", retries=5)
async def slow_write(ctx: StepContext, config: SlowWriteConfig) -> dict:
    """Write to the scratchpad (idempotently) and take a while, in either order."""
    pad = Scratchpad.in_folder(ctx.work_dir)
    try:
        if config.write_first:
            pad.write(config.key, config.text, effect_id=ctx.idempotency_key)
        await asyncio.sleep(config.seconds)
        if not config.write_first:
            pad.write(config.key, config.text, effect_id=ctx.idempotency_key)
    finally:
        pad.close()
    return {"key": config.key}


class WaitFileConfig(StepConfig):
    path: str


@step_type("wait_file", config=WaitFileConfig, heartbeat_timeout="2s")
async def wait_file(ctx: StepContext, config: WaitFileConfig) -> dict:
    """Wait until a file exists: lets a test decide when the step finishes."""
    started = time.monotonic()
    while not Path(config.path).exists():
        await asyncio.sleep(0.05)
    return {"waited": round(time.monotonic() - started, 3)}


@step_type("huge", local=True, retries=0)
async def huge(ctx: StepContext, config: StepConfig) -> dict:
    """Return outputs too large for workflow history."""
    return {"blob": "x" * 200_000}
