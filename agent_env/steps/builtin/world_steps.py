"""World steps: set the clock, register or cancel triggers, wait for a virtual time.

They are decisions, so the workflow applies them itself (`in_workflow`, the verb it applies); these
declarations give their configs a schema and validation. Their names and what they do are the world's
verbs (agent_env.spec.verbs), shared with trigger actions of the same name.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from agent_env.spec.duration import MAX_SECONDS
from agent_env.spec.verbs import VERBS, WorldStepVerb
from agent_env.spec.world import MAX_RATE, TimeValue
from agent_env.steps import StepConfig, StepContext, StepType, step_type


class SetClockConfig(StepConfig):
    time: TimeValue | None = Field(None, description="RFC 3339, or +DURATION from the clock's start")
    rate: float | None = Field(None, gt=0, le=MAX_RATE, description="paced: virtual seconds per real second")
    mode: Literal["frozen", "paced", "event_driven"] | None = None

    @model_validator(mode="after")
    def _something(self) -> SetClockConfig:
        if self.time is None and self.rate is None and self.mode is None:
            raise ValueError("say what to change: time, rate and/or mode")
        return self


class TriggersConfig(StepConfig):
    triggers: list[str] = Field(default_factory=lambda: ["*"], description="trigger ids (default: all)")


class CancelConfig(StepConfig):
    triggers: list[str] = Field(min_length=1)


class WaitClockConfig(StepConfig):
    until: TimeValue | None = Field(None, description="RFC 3339, or +DURATION from the clock's start")
    seconds: float | None = Field(
        None, ge=0, le=MAX_SECONDS, description="virtual seconds from when the step starts (at most 100 years)"
    )

    @model_validator(mode="after")
    def _one(self) -> WaitClockConfig:
        if (self.until is None) == (self.seconds is None):
            raise ValueError("give exactly one of `until` or `seconds`")
        return self


def _world_step(verb: WorldStepVerb, config: type[StepConfig]) -> StepType:
    async def applied_by_the_workflow(ctx: StepContext, cfg: StepConfig) -> None:
        raise RuntimeError("world steps are applied by the workflow, not run as activities")

    applied_by_the_workflow.__doc__ = VERBS[verb].does
    return step_type(verb, config=config, local=True, in_workflow=True, verb=verb)(applied_by_the_workflow)


set_clock = _world_step("set_clock", SetClockConfig)
register_triggers = _world_step("register_triggers", TriggersConfig)
cancel_triggers = _world_step("cancel_triggers", CancelConfig)
wait_clock = _world_step("wait_clock", WaitClockConfig)
