"""`teardown_sandboxes`, the framework's: remove the sandboxes behind named agents, envs and bare sandboxes
mid-run, so a long task stops paying for them after their last use (place it after that step).

The names are what the task deploys: `sandbox_names` a deploy_sandbox step's `sandbox_name`, `env_ids` a
deploy_env step's `env_id`, `agent_names` a deploy_agent step's agent (its `as`, else its agent's name). When the run is
planned each becomes a reference to the deploying step's outputs; a name no step deploys is refused then.
Removal is best effort, as in the framework: a sandbox already gone or that fails to go is reported in the
outputs (`already_gone`, `failed`) and the step still succeeds. Only sandboxes of this run are removed. An env's instance stays on the
gateway (its apps' sandboxes go); `teardown_env` ends the instance itself.
"""

from __future__ import annotations

import logging

from pydantic import Field, model_validator

from agent_env.errors import AgentEnvError, BadInput
from agent_env.gateway_client.wire import JsonObject
from agent_env.providers import by_name
from agent_env.spec.run import PlannedConfig
from agent_env.spec.task import upstream
from agent_env.steps import PlanContext, StepConfig, StepContext, step_type

log = logging.getLogger(__name__)

# what each list names: (its deploying step's type, the config fields that give the name, first given wins)
KINDS = {
    "sandbox_names": ("deploy_sandbox", ("sandbox_name",)),
    "env_ids": ("deploy_env", ("env_id",)),
    "agent_names": ("deploy_agent", ("as", "as_", "agent", "record.name")),
}


class TeardownSandboxesConfig(StepConfig):
    agent_names: list[str] = Field(default_factory=list, description="deploy_agent steps' agents")
    env_ids: list[str] = Field(default_factory=list, description="deploy_env steps' envs")
    sandbox_names: list[str] = Field(default_factory=list, description="deploy_sandbox steps' sandbox_name")
    targets: list[JsonObject] = Field(
        default_factory=list, description="filled in when the run is planned: each name and its step's outputs"
    )

    @model_validator(mode="after")
    def _some(self) -> TeardownSandboxesConfig:
        if not (self.agent_names or self.env_ids or self.sandbox_names):
            raise ValueError("give at least one of agent_names, env_ids, sandbox_names")
        return self


def _name_of(config: JsonObject, fields: tuple[str, ...]) -> object:
    for field in fields:
        outer, _, inner = field.partition(".")
        value = config.get(outer)
        value = value.get(inner) if inner and isinstance(value, dict) else value
        if value is not None:
            return value
    return None


def prepare_teardown(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    """Each name, as a reference to the outputs of the step before this one that deploys it."""
    task = plan.task
    if task is None:
        raise BadInput("teardown_sandboxes: names are resolved within a task", "plan the step as part of a task")
    before = upstream(str(plan.step_id), {s.id: s.depends_on for s in task.steps})
    targets: list[JsonObject] = []
    for field, (deploy_type, name_fields) in KINDS.items():
        for name in config.get(field) or []:
            steps = [s.id for s in task.steps if s.type == deploy_type and _name_of(s.config, name_fields) == name]
            if not steps:
                raise BadInput(
                    f"step {plan.step_id!r}: {field} names {name!r}, which no {deploy_type} step of task "
                    f"{task.id!r} deploys",
                    "name what a step of the task deploys",
                )
            late = [s for s in steps if s not in before]
            if late:
                raise BadInput(
                    f"step {plan.step_id!r}: {name!r} is deployed by step {late[0]!r}, which it does not come after",
                    f"add {late[0]!r} to its depends_on",
                )
            targets += [{"kind": field, "name": name, "deployed": f"${{steps.{s}.outputs}}"} for s in steps]
    config["targets"] = targets
    return config


def sandboxes_of(outputs: object) -> list[tuple[str, str]]:
    """(provider, sandbox id) of each sandbox a deploy step's outputs record."""
    if not isinstance(outputs, dict):
        return []
    boxes = [outputs["sandbox"]] if isinstance(outputs.get("sandbox"), dict) else []
    boxes += [b for b in outputs.get("sandboxes") or [] if isinstance(b, dict)]
    return [(str(b["provider"]), str(b["id"])) for b in boxes if b.get("provider") and b.get("id")]


@step_type(
    "teardown_sandboxes",
    config=TeardownSandboxesConfig,
    timeout="5m",
    prepare=prepare_teardown,
)
async def teardown_sandboxes(ctx: StepContext, config: TeardownSandboxesConfig) -> JsonObject:
    """Remove the sandboxes behind named agents, envs and bare sandboxes mid-run (best effort)."""
    removed: list[str] = []
    gone: list[str] = []
    failed: list[JsonObject] = []
    mine: dict[str, set[str]] = {}  # provider -> this run's sandbox ids
    for target in config.targets:
        for provider_name, sandbox_id in sandboxes_of(target.get("deployed")):
            try:
                provider = by_name.load(provider_name, ctx.settings)
                if provider_name not in mine:
                    mine[provider_name] = {info.id for info in await provider.list(ctx.run_id)}
                if sandbox_id not in mine[provider_name]:  # gone already (or never this run's: left alone)
                    gone.append(sandbox_id)
                    continue
                if await provider.remove(sandbox_id):
                    removed.append(sandbox_id)
                    mine[provider_name].discard(sandbox_id)
            except AgentEnvError as e:
                log.warning("teardown_sandboxes: %s of %s: %s", sandbox_id, target["name"], e)
                failed.append({"id": sandbox_id, "target": target["name"], "error": str(e)[:300]})
            ctx.heartbeat()
    return {"torn_down_sandbox_ids": removed, "already_gone": gone, "failed": failed}
