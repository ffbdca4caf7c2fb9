"""Bringing a person into a run as an agent: the framework's `deploy_human_agent` step.

Without `a2a_url` the person is a `human` agent hosted by the gateway: each turn the run gives it (a
`prompt_agent` step naming this one) waits in the people's inbox until someone answers it with
`agent-env agents answer ID TEXT` (or `POST /admin/human/{id}`); `agent-env agents pending` lists them. With
`a2a_url` the person answers through an A2A endpoint of their own, which an agent may also take as a peer.
Either way the step deploys the agent as `deploy_agent` does, and its outputs are the same, so every step that
names a deployed agent names this one alike. As in the framework, a task has at most one human agent.
"""

from __future__ import annotations

from typing import cast

from pydantic import ConfigDict, Field

from agent_env.errors import BadInput
from agent_env.gateway_client.wire import JsonObject
from agent_env.spec.agent import NAME, AgentRecord
from agent_env.spec.run import PlannedConfig
from agent_env.steps import PlanContext, StepConfig, StepContext, step_type
from agent_env.steps.builtin.agent_deploy import DeployAgentConfig, deploy_agent

STEP = "deploy_human_agent"


class DeployHumanAgentConfig(StepConfig):
    model_config = ConfigDict(extra="forbid")

    agent_name: str = Field("human_agent", pattern=NAME, description="the person's name in the run")
    a2a_url: str | None = Field(
        None,
        description="the person's own A2A endpoint; default: a human agent hosted by the gateway, whose turns "
        "wait in the people's inbox (`agent-env agents pending` / `answer`)",
    )
    record: AgentRecord | None = Field(None, description="filled in when the run is planned")


def prepare_deploy_human_agent(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    """The person's agent record, pinned with the run; a second human agent in one task is refused."""
    others = [s.id for s in (plan.task.steps if plan.task else []) if s.type == STEP and s.id != plan.step_id]
    if others:
        raise BadInput(
            f"step {plan.step_id!r} deploys a human agent, and so does {others[0]!r}: a task has at most one",
            "keep one deploy_human_agent step, and prompt that person from every step that needs them",
        )
    name = config.get("agent_name") or "human_agent"
    if config.get("a2a_url"):
        record = AgentRecord(name=name, type="a2a", description="A person", config={"url": config["a2a_url"]})
    else:
        record = AgentRecord(name=name, type="human", description="A person answering through agent-env's inbox")
    config["record"] = record.model_dump(mode="json")
    return config


@step_type(
    STEP,
    config=DeployHumanAgentConfig,
    local=True,
    timeout="1m",
    prepare=prepare_deploy_human_agent,
    deploys_agent=True,
)
async def deploy_human_agent(ctx: StepContext, config: DeployHumanAgentConfig) -> JsonObject:
    """Bring a person in as an agent: hosted (turns answered from the inbox) or at their own A2A endpoint."""
    record = cast(AgentRecord, config.record)  # pinned when the run is planned
    return (await deploy_agent(ctx, DeployAgentConfig(record=record))).outputs
