"""The `register_agent_triggers` step: deterministic rules (agents.agent_triggers) registered on a deployed agent
that declares urn:agentenv:triggers/v1 (it plays a user); a prompt_agent conversation it is the partner of asks it
to decide each of its turns first (steps.builtin.agent_extensions.partner_decision). The rules are validated when
the run is planned, as the agent validates them: a pattern RE2 cannot run, an unknown `when`, fail there.
"""

from __future__ import annotations

from pydantic import Field

from agent_env.agents.agent_triggers import AgentTrigger
from agent_env.agents.extension_ops import TRIGGERS, register_triggers
from agent_env.agents.extensions import ExtensionRefused
from agent_env.gateway_client.wire import JsonObject
from agent_env.spec.run import PlannedConfig
from agent_env.spec.templates import ref
from agent_env.steps import PlanContext, StepConfig, StepContext, StepFailed, step_type
from agent_env.steps.builtin.agent_extensions import deployed_extension


class RegisterAgentTriggersConfig(StepConfig):
    framework_names = {"agent_name": ("agent", "agent_step")}

    agent: str = Field(description="the deploy_agent step of the agent that takes the rules (it plays a user)")
    triggers: list[AgentTrigger] = Field(min_length=1, max_length=256, description="the rules (agent_triggers)")
    deployed: JsonObject = Field(default_factory=dict, description="filled in when the run is planned")


def prepare_register_agent_triggers(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    config["deployed"] = ref(f"steps.{config['agent']}.outputs")
    return config


@step_type(
    "register_agent_triggers",
    config=RegisterAgentTriggersConfig,
    timeout="1m",
    prepare=prepare_register_agent_triggers,
    step_refs=("agent",),
)
async def register_agent_triggers(ctx: StepContext, config: RegisterAgentTriggersConfig) -> JsonObject:
    """Register deterministic replies on an agent that declares urn:agentenv:triggers/v1; a prompt_agent
    conversation it plays the partner of asks it to decide each of its turns."""
    fix = "serve the extension (our SDK: `triggers = True`), or take the rules out of the task"
    client = await deployed_extension(ctx, config.deployed, TRIGGERS, step=config.agent, fix=fix)
    rules = [t.model_dump(mode="json", exclude_none=True) for t in config.triggers]
    try:
        added = await register_triggers(client, rules)
    except ExtensionRefused as e:
        raise StepFailed(f"agent {config.deployed['name']!r}: {e}") from None
    return {"agent": config.deployed["name"], "added": added}
