"""`scratchpad_write` / `scratchpad_read`: test steps over a run's scratchpad (see scratchpad.py)."""

from __future__ import annotations

from pydantic import Field

from agent_env.steps import StepConfig, StepContext, step_type
from agentenv_teststeps.scratchpad import Scratchpad


class WriteConfig(StepConfig):
    key: str = Field(min_length=1, max_length=200)
    text: str = Field(max_length=10_000)


class ReadConfig(StepConfig):
    keys: list[str] | None = Field(None, description="only these keys; default: every note")


@step_type("scratchpad_write", config=WriteConfig, timeout="30s")
def scratchpad_write(ctx: StepContext, config: WriteConfig) -> dict:
    """Write a note to the run's scratchpad (idempotent: a retried step writes once)."""
    pad = Scratchpad.in_folder(ctx.work_dir)
    try:
        pad.write(config.key, config.text, effect_id=ctx.idempotency_key)
    finally:
        pad.close()
    # The same outputs whether this attempt wrote the note or a crashed earlier attempt did.
    return {"key": config.key}


@step_type("scratchpad_read", config=ReadConfig, timeout="30s")
def scratchpad_read(ctx: StepContext, config: ReadConfig) -> dict:
    """Read notes from the run's scratchpad."""
    pad = Scratchpad.in_folder(ctx.work_dir)
    try:
        notes = pad.read(config.keys)
    finally:
        pad.close()
    return {"count": len(notes), "notes": notes}
