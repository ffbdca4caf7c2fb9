"""World steps: set the clock, register or cancel triggers, wait for a virtual time.

They are decisions, so the workflow applies them itself (`in_workflow`, the verb it applies); these
declarations give their configs a schema and validation. What they do are the world's verbs
(agent_env.spec.verbs); `sync_env_clock` and `register_env_triggers` are the AgentEnv Framework's step names.

The framework's fields are taken as well: `env_id` (a deploy_env step's env: checked when the run is planned;
every env of a run shares the world's clock and triggers), `virtual_time` and `virtual_seconds_per_real_second`
(0: frozen), mapped onto ours (`time`, `rate`, `mode`) when the run is planned. Triggers written in full in the
framework's format are read into ours when the task is loaded (agent_env.spec.framework_triggers), with the step's
`watch_roles`, `executor_agent_name` and `executor_timeout_seconds`; `await_fired` holds the step until the
triggers it names have fired, for at most `await_timeout_seconds` (real time). The framework's fields that mean
nothing here are refused naming the field: executors' working hours, timeouts of calls the workflow does not make.
"""

from __future__ import annotations

from typing import Any, Literal, NoReturn

from pydantic import Field, ValidationInfo, field_validator, model_validator

from agent_env.spec.duration import MAX_SECONDS
from agent_env.spec.run import PlannedConfig
from agent_env.spec.verbs import VERBS, WorldStepVerb
from agent_env.spec.world import MAX_RATE, TimeValue
from agent_env.steps import PlanContext, PrepareFunction, StepConfig, StepContext, StepType, step_type
from agent_env.steps.builtin.envs import deploying_env_step

ENV_ID = (
    "the env a deploy_env step of this task deploys (checked when the run is planned); all of a run's envs share it"
)


# The framework's fields that mean nothing here (or not yet): given, each is an error naming it and why.
REFUSED = {
    "timeout_seconds": "the workflow sets the world's clock itself, with no call to time out",
    "watch_roles": "it applies to triggers written in full in the framework's format in this step; ours name "
    "their roles (`when.roles`)",
    "executor_agent_name": "it carries out the nl actions of triggers written in full in the framework's format in "
    "this step; our `instruct` action names its agent (`by`, a deploy_agent step)",
    "executor_timeout_seconds": "it goes with the nl actions of triggers written in the framework's format in this "
    "step; our `instruct` action has its own `timeout`",
    "executor_hours": "working hours of executor agents are not taken here: give the nl action a `delay`",
}


def _refuse(info: ValidationInfo) -> NoReturn:
    raise ValueError(f"`{info.field_name}` is not taken here: {REFUSED[str(info.field_name)]}; remove it")


class SyncEnvClockConfig(StepConfig):
    time: TimeValue | None = Field(None, description="RFC 3339, or +DURATION from the clock's start")
    rate: float | None = Field(None, gt=0, le=MAX_RATE, description="paced: virtual seconds per real second")
    mode: Literal["frozen", "paced", "event_driven"] | None = None
    env_id: str | None = Field(None, description=ENV_ID)
    virtual_time: TimeValue | None = Field(None, description="the framework's `time` (RFC 3339)")
    virtual_seconds_per_real_second: float | None = Field(
        None, ge=0, le=MAX_RATE, description="the framework's pace: 0 frozen, else paced at this rate (default 1)"
    )
    tolerate_missing_sync_time: bool = Field(
        True, description="the framework's: apps that do not declare clock/v1 keep their own (true only)"
    )
    timeout_seconds: float | None = Field(None, description="the framework's; refused: the workflow makes no call")

    @field_validator("timeout_seconds")
    @classmethod
    def _refused(cls, value: Any, info: ValidationInfo) -> Any:
        _refuse(info)

    @field_validator("tolerate_missing_sync_time")
    @classmethod
    def _tolerant(cls, value: bool) -> bool:
        if not value:
            raise ValueError(
                "`tolerate_missing_sync_time: false` is not taken here: the gateway stamps every call with the "
                "world's time and tells the apps that declare clock/v1; one that does not is not an error"
            )
        return value

    @model_validator(mode="after")
    def _something(self) -> SyncEnvClockConfig:
        if self.time is not None and self.virtual_time is not None:
            raise ValueError("give `virtual_time` (the framework's name) or `time`, not both")
        if self.virtual_seconds_per_real_second is not None and (self.rate is not None or self.mode is not None):
            raise ValueError("give `virtual_seconds_per_real_second` (the framework's) or `rate`/`mode`, not both")
        framework = self.virtual_time is not None or self.virtual_seconds_per_real_second is not None
        if not framework and self.time is None and self.rate is None and self.mode is None:
            raise ValueError("say what to change: virtual_time or time, rate and/or mode")
        return self


def _clock_as_ours(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    """The framework's fields as ours, which the workflow applies: `virtual_time` is `time`; its pace (default 1
    when either is given) is `rate` in paced mode, or frozen at 0."""
    _check_env_id(config, plan)
    config = dict(config)
    config.pop("tolerate_missing_sync_time", None)
    framework = "virtual_time" in config or "virtual_seconds_per_real_second" in config
    if "virtual_time" in config:
        config["time"] = config.pop("virtual_time")
    if framework:
        pace = config.pop("virtual_seconds_per_real_second", None)
        pace = 1.0 if pace is None else pace
        if pace == 0:
            config["mode"] = "frozen"
        else:
            config.update(mode="paced", rate=pace)
    return config


class RegisterEnvTriggersConfig(StepConfig):
    triggers: list[str] = Field(
        default_factory=lambda: ["*"],
        description="trigger ids (default: all); a trigger written here in full (ours, or the framework's format) "
        "joins the task's [[triggers]]",
    )
    env_id: str | None = Field(None, description=ENV_ID)
    watch_roles: Any = Field(None, description="the framework's: the roles whose calls its action triggers watch")
    executor_agent_name: Any = Field(None, description="the framework's: the agent that carries out nl actions")
    executor_timeout_seconds: Any = Field(None, description="the framework's: how long its executor has")
    executor_hours: Any = Field(None, description="the framework's; refused: give the nl action a `delay`")
    await_fired: list[str] | None = Field(
        None, min_length=1, description="the step ends once each of these triggers has fired (once)"
    )
    await_timeout_seconds: float = Field(
        120, gt=0, le=MAX_SECONDS, description="with await_fired: real seconds to wait before the step fails"
    )

    @field_validator("watch_roles", "executor_agent_name", "executor_timeout_seconds", "executor_hours")
    @classmethod
    def _refused(cls, value: Any, info: ValidationInfo) -> Any:
        if value is not None:  # (what the framework's triggers of the step used is consumed when they are read)
            _refuse(info)
        return value

    @model_validator(mode="after")
    def _awaits_its_own(self) -> RegisterEnvTriggersConfig:
        unknown = [t for t in self.await_fired or [] if "*" not in self.triggers and t not in self.triggers]
        if unknown:
            raise ValueError(
                f"`await_fired` names {unknown}, which this step does not register (it registers {self.triggers})"
            )
        return self


def _check_env_id(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    """`env_id` must be an env a deploy_env step of the task deploys, before this step."""
    if isinstance(config.get("env_id"), str):
        deploying_env_step(config["env_id"], plan)
    return config


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


def _world_step(verb: WorldStepVerb, config: type[StepConfig], prepare: PrepareFunction | None = None) -> StepType:
    async def applied_by_the_workflow(ctx: StepContext, cfg: StepConfig) -> None:
        raise RuntimeError("world steps are applied by the workflow, not run as activities")

    applied_by_the_workflow.__doc__ = VERBS[verb].does
    return step_type(verb, config=config, local=True, in_workflow=True, verb=verb, prepare=prepare)(
        applied_by_the_workflow
    )


sync_env_clock = _world_step("sync_env_clock", SyncEnvClockConfig, _clock_as_ours)
register_env_triggers = _world_step("register_env_triggers", RegisterEnvTriggersConfig, _check_env_id)
cancel_triggers = _world_step("cancel_triggers", CancelConfig)
wait_clock = _world_step("wait_clock", WaitClockConfig)
