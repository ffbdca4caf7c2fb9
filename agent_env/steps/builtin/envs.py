"""Steps that act on environments through the gateway.

An environment is deployed by a `deploy_env` step; later steps name that step in `env` (the instance
is `<run id>.<step id>`). Setup calls carry the step's idempotency key, so a step retried after a
crash takes effect once.
"""

from __future__ import annotations

import json
from typing import Any, Literal, cast

from pydantic import Field, model_validator

from agent_env import packing
from agent_env.errors import BadInput
from agent_env.gateway.release import retire_instance
from agent_env.gateway_client import wire
from agent_env.gateway_client.wire import JsonObject
from agent_env.providers import apps, topologies
from agent_env.spec.run import Criterion, PlannedConfig, Score
from agent_env.spec.task import upstream
from agent_env.spec.templates import TemplateError, lookup
from agent_env.steps import PlanContext, StepConfig, StepContext, StepFailed, StepResult, step_type
from agent_env.steps.builtin.check import Check
from agent_env.steps.builtin.env_step_configs import ActorStep, EnvStep
from agent_env.stores import keys


def instance_id(ctx: StepContext, env_step: str) -> str:
    return f"{ctx.run_id}.{env_step}"


def store_artifact(plan: PlanContext, data: bytes) -> str:
    """Content-addressed: the same bytes always get the same key, stored once."""
    key = keys.content(data, "json")
    if not plan.stores.objects.exists(key):
        plan.stores.objects.put(key, data)
    return key


# -- data --


class LoadDataConfig(EnvStep):
    data: dict[str, Any] | None = Field(None, description="inline data: {app: {table: [rows]}}")
    file: str | None = Field(None, description="a JSON file of the bundle, relative to its folder")
    reset: bool = Field(False, description="empty every app first")
    artifact: str | None = Field(None, description="filled in when the run is planned")

    @model_validator(mode="after")
    def _one_source(self) -> LoadDataConfig:
        if (self.data is None) == (self.file is None and self.artifact is None):
            raise ValueError("give exactly one of `data` (inline) or `file` (a JSON file of the bundle)")
        return self


def prepare_load(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:

    if config.get("file"):
        if plan.bundle is None:
            raise BadInput(
                f"load_data file {config['file']!r}: a task outside a bundle has no files",
                "put the task in a bundle (tasks/ beside the data) or give the data inline",
            )
        try:  # no link followed, not even one that stays inside (see agent_env.packing)
            data = packing.read(plan.bundle, config["file"])
        except packing.NotInside:
            raise BadInput(
                f"load_data file {config['file']!r} is not a file inside the bundle {plan.bundle}",
                "name a JSON file inside the bundle's folder",
            ) from None
        except BadInput as e:
            raise BadInput(f"load_data file {config['file']!r}: {e.problem}", e.fix) from None
        config["artifact"] = store_artifact(plan, data)
    return config


@step_type("load_data", config=LoadDataConfig, timeout="10m", prepare=prepare_load, step_refs=("env",))
async def load_data(ctx: StepContext, config: LoadDataConfig) -> JsonObject:
    """Load data into an environment's apps (once, even if the step is retried)."""
    data = (
        config.data
        if config.data is not None
        else json.loads(await ctx.stores.aio.objects.get(cast(str, config.artifact)))
    )  # (`file`: an artifact once planned)
    gateway = await ctx.gateway()
    await gateway.load(
        instance_id(ctx, config.env),
        [{"kind": "data", "data": data}],
        idempotency_key=ctx.idempotency_key,
        reset=config.reset,
    )
    return {"apps": sorted(data)}


@step_type("reset_env", config=EnvStep, local=True, timeout="1m", step_refs=("env",))
async def reset_env(ctx: StepContext, config: EnvStep) -> JsonObject:
    """Empty every app of an environment."""
    await (await ctx.gateway()).data(instance_id(ctx, config.env), "data/reset")
    return {}


# -- roles and tools --


class ModifyToolAccessConfig(StepConfig):
    """The framework's `modify_env_tool_access`: `action` enable or disable `tools` for `role`, the role's other
    rules kept (as the trigger action `set_tools` does). Ours as well: without `action`, `tools` (and `deny`) replace
    the role's rules. The env is `env` (a deploy_env step's id) or the framework's `env_id` (the env it deploys)."""

    env: str | None = Field(None, description="the id of the deploy_env step whose environment this step acts on")
    env_id: str | None = Field(None, description="or the env a deploy_env step of this task deploys")
    role: str
    action: Literal["enable", "disable"] | None = Field(
        None, description="enable or disable `tools`, keeping the role's other rules; without it, replace them"
    )
    tools: list[str] = Field(default_factory=lambda: ["*"], description="tool names or patterns")
    deny: list[str] = Field(default_factory=list, description="without `action`: patterns the role is denied")

    @model_validator(mode="after")
    def _one_env(self) -> ModifyToolAccessConfig:
        if (self.env is None) == (self.env_id is None):
            raise ValueError("give exactly one of `env` (a deploy_env step's id) or `env_id` (the env it deploys)")
        if self.action is not None and self.deny:
            raise ValueError(
                "`deny` goes with no `action` (it replaces the role's rules): list them in `tools` with "
                "action disable instead"
            )
        return self


def deploying_env_step(env_id: str, plan: PlanContext) -> str:
    """The id of the deploy_env step of the task that deploys `env_id` and comes before this step."""
    task = plan.task
    if task is None:
        raise BadInput(f"{plan.step_id}: env_id is resolved within a task", "plan the step as part of a task")
    deploys = [s for s in task.steps if s.type == "deploy_env" and s.config.get("env_id") == env_id]
    where = f"step {plan.step_id!r}"
    if not deploys:
        raise BadInput(f"{where}: env_id {env_id!r} is deployed by no deploy_env step of task {task.id!r}", "add one")
    if len(deploys) > 1:
        raise BadInput(f"{where}: steps {[s.id for s in deploys]} all deploy env {env_id!r}", "deploy it once")
    deploy = deploys[0].id
    if plan.step_id is not None and deploy not in upstream(plan.step_id, {s.id: s.depends_on for s in task.steps}):
        raise BadInput(
            f"{where}: env {env_id!r} is deployed by step {deploy!r}, which it does not come after",
            f"add {deploy!r} to its depends_on",
        )
    return deploy


def env_step_of(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    """The framework's `env_id` becomes the id of the deploy_env step that deploys it (our `env`)."""
    if isinstance(config.get("env_id"), str) and config.get("env") is None:
        env = deploying_env_step(config["env_id"], plan)
        config = {**{k: v for k, v in config.items() if k != "env_id"}, "env": env}
    return config


@step_type(
    "modify_env_tool_access",
    config=ModifyToolAccessConfig,
    local=True,
    timeout="1m",
    step_refs=("env",),
    prepare=env_step_of,
)
async def modify_env_tool_access(ctx: StepContext, config: ModifyToolAccessConfig) -> JsonObject:
    """Change which tools a role sees and may call (from the next call; agents are notified)."""
    if config.env is None:
        raise StepFailed("the step's env_id was not resolved when the run was planned: plan the task again")
    gateway, instance = await ctx.gateway(), instance_id(ctx, config.env)
    if config.action is None:
        tools = await gateway.set_role(instance, config.role, config.tools, config.deny)
    else:
        enable, disable = (config.tools, []) if config.action == "enable" else ([], config.tools)
        tools = await gateway.change_role(instance, config.role, enable, disable)
    return {"role": config.role, "tools": tools}


class CallToolConfig(ActorStep):
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    expect_error: bool = Field(False, description="succeed when the tool answers with an error (and output it)")


async def _call(
    ctx: StepContext, config: ActorStep, tool: str, arguments: dict[str, Any], key: str | None
) -> wire.CallOutcome:
    gateway = await ctx.gateway()
    instance = instance_id(ctx, config.env)
    role = config.role
    if role is None and config.agent is None:
        role = next(iter((await gateway.get_instance(instance))["roles"]))
    return await gateway.call_as(instance, tool, arguments, role=role, agent=config.agent, idempotency_key=key)


@step_type("call_tool", config=CallToolConfig, local=True, timeout="1m", step_refs=("env",))
async def call_tool(ctx: StepContext, config: CallToolConfig) -> StepResult:
    """Call a tool as a role or agent (setup and probes); its result becomes the step's output."""
    outcome = await _call(ctx, config, config.tool, config.arguments, ctx.idempotency_key)
    # the call may fire triggers (an email to a persona...): the run applies them (StepResult keeps them as JSON)
    hits = cast(list[JsonObject], outcome.get("hits", []))
    if "error" in outcome:
        if config.expect_error:
            return StepResult(outputs={"error": outcome["error"]}, hits=hits)
        raise StepFailed(f"{config.tool}: {outcome['error']}")
    if config.expect_error:
        raise StepFailed(f"{config.tool} succeeded, but the step expected an error")
    return StepResult(outputs={"result": outcome["result"]}, hits=hits)


class StateCheck(Check):
    """A check whose value comes from a (read-only) tool call: `tool`, `arguments`, and a `path` into
    the result (dots walk into objects and lists, e.g. `charges.0.status`)."""

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    path: str = Field("", description="where in the result the value is; empty for the whole result")


class CheckStateConfig(ActorStep):
    checks: list[StateCheck] = Field(min_length=1)
    pass_threshold: float = Field(1.0, ge=0, le=1)


@step_type("check_state", config=CheckStateConfig, local=True, timeout="1m", retries=1, step_refs=("env",))
async def check_state(ctx: StepContext, config: CheckStateConfig) -> StepResult:
    """Assertions over an environment's state, read through its tools; records the score."""
    criteria, values = [], {}
    for check in config.checks:
        outcome = await _call(ctx, config, check.tool, check.arguments, None)
        if "error" in outcome:
            criteria.append(
                Criterion(
                    name=check.name,
                    passed=False,
                    weight=check.weight,
                    detail=f"{check.tool} failed: {outcome['error']}",
                )
            )
            continue
        try:
            value = lookup({"result": outcome["result"]}, "result" + (f".{check.path}" if check.path else ""))
        except TemplateError as e:
            criteria.append(Criterion(name=check.name, passed=False, weight=check.weight, detail=str(e)))
            continue
        values[check.name] = value
        criteria.append(check.evaluate_on(value))
    return StepResult(outputs={"values": values}, score=Score.from_criteria(criteria, config.pass_threshold))


# -- teardown --


class TeardownConfig(EnvStep):
    keep_data: bool = Field(False, description="keep the apps' files (the instance still stops serving)")


@step_type("teardown_env", config=TeardownConfig, timeout="5m", step_refs=("env",))
async def teardown_env(ctx: StepContext, config: TeardownConfig) -> JsonObject:
    """Stop serving an environment and its sandboxes; its trajectory is kept in the object store first."""

    instance = instance_id(ctx, config.env)
    gateway = await ctx.gateway()
    outputs = await retire_instance(gateway, ctx.stores, ctx.run_id, instance, keep_data=config.keep_data)
    if await topologies.close_server(ctx.settings, ctx.stores, instance, gateway):  # its own server stops too
        outputs["server_stopped"] = True
    if removed := await apps.remove_sandboxes(ctx.settings, ctx.run_id, owner=instance):
        outputs["sandboxes_removed"] = len(removed)
    return outputs
