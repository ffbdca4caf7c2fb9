"""The `peer_agents` step: tell a deployed agent which others it may delegate to, through
urn:agentenv:peer-agents/v1, once they are all deployed. deploy_agent's own `peers` take only agents deployed
before it; this step peers agents both ways (A with B, and B with A: one step each).
"""

from __future__ import annotations

from pydantic import Field, model_validator

from agent_env.agents.client import agent_client
from agent_env.agents.extension_ops import PEER_AGENTS
from agent_env.gateway_client.wire import JsonObject
from agent_env.spec.run import PlannedConfig
from agent_env.spec.templates import ref
from agent_env.steps import PlanContext, StepConfig, StepContext, step_type
from agent_env.steps.builtin.agent_extensions import deploy_extras, deployed_extension


class PeerAgentsConfig(StepConfig):
    refused_fields = {
        "peerings": "a step tells one agent its peers here: `agent` and `peers` (deploy_agent steps); "
        "write a step for each agent"
    }

    agent: str = Field(description="the deploy_agent step of the agent that is told its peers")
    peers: list[str] = Field(min_length=1, max_length=64, description="the deploy_agent steps of its peers")
    deployed: JsonObject = Field(default_factory=dict, description="filled in when the run is planned")
    peers_deployed: dict[str, JsonObject] = Field(default_factory=dict, description="filled in when the run is planned")

    @model_validator(mode="after")
    def _not_itself(self) -> PeerAgentsConfig:
        if self.agent in self.peers:
            raise ValueError(f"`peers` names {self.agent!r}, the agent itself: an agent is not its own peer")
        return self


def prepare_peer_agents(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    config["deployed"] = ref(f"steps.{config['agent']}.outputs")
    config["peers_deployed"] = {p: ref(f"steps.{p}.outputs") for p in config["peers"]}
    return config


@step_type(
    "peer_agents", config=PeerAgentsConfig, timeout="1m", prepare=prepare_peer_agents, step_refs=("agent", "peers")
)
async def peer_agents(ctx: StepContext, config: PeerAgentsConfig) -> JsonObject:
    """Send an agent that declares urn:agentenv:peer-agents/v1 its routing table: the other agents' names, URLs
    and cards. It replaces any table sent before."""
    name = config.deployed.get("name", config.agent)
    fix = "serve the extension (our SDK: `peer_agents = True`), or take the step out of the task"
    client = await deployed_extension(ctx, config.deployed, PEER_AGENTS, step=config.agent, fix=fix)
    sent = await deploy_extras(
        client, name, config.peers_deployed, lambda url: agent_client(ctx.settings, url, hosted=False).card()
    )
    return {"agent": name, "peers": sent.get("peers", [])}
