"""The `peer_agents` step: tell a deployed agent which others it may delegate to, through
urn:agentenv:peer-agents/v1, once they are all deployed. deploy_agent's own `peers` take only agents deployed
before it; this step peers agents both ways (A with B, and B with A). It tells one agent (`agent`, `peers`: our
deploy_agent steps), or several at once as the framework's `peerings` do (each a source agent and its peers, by
the names the framework gives deployed agents: planning finds the deploy_agent step of each).
"""

from __future__ import annotations

from typing import cast

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_env.agents.client import agent_client
from agent_env.agents.extension_ops import PEER_AGENTS
from agent_env.errors import BadInput
from agent_env.gateway_client.wire import JsonObject
from agent_env.spec.named_steps import agent_step
from agent_env.spec.run import PlannedConfig
from agent_env.spec.templates import ref
from agent_env.steps import PlanContext, StepConfig, StepContext, step_type
from agent_env.steps.builtin.agent_extensions import deploy_extras, deployed_extension


class Peering(BaseModel):
    """The framework's peering: an agent, and the agents it may delegate to, by name."""

    model_config = ConfigDict(extra="forbid")
    source_agent_name: str = Field(min_length=1)
    peer_agent_names: list[str] = Field(min_length=1, max_length=64)

    @model_validator(mode="after")
    def _not_itself(self) -> Peering:
        if self.source_agent_name in self.peer_agent_names:
            raise ValueError(f"peerings: {self.source_agent_name!r} lists itself as a peer")
        return self


class PeerAgentsConfig(StepConfig):
    agent: str | None = Field(None, description="the deploy_agent step of the agent that is told its peers")
    peers: list[str] = Field(default_factory=list, max_length=64, description="the deploy_agent steps of its peers")
    peerings: list[Peering] = Field(
        default_factory=list, max_length=64, description="or several agents at once, by name (the framework's)"
    )
    deployed: JsonObject = Field(default_factory=dict, description="filled in when the run is planned")
    peers_deployed: dict[str, JsonObject] = Field(default_factory=dict, description="filled in when the run is planned")
    peerings_deployed: list[JsonObject] = Field(default_factory=list, description="filled in when the run is planned")

    @model_validator(mode="after")
    def _not_itself(self) -> PeerAgentsConfig:
        if (self.agent is None) == (not self.peerings):
            raise ValueError("give `agent` and `peers` (deploy_agent steps), or `peerings` (agents by name)")
        if self.agent is not None and not self.peers:
            raise ValueError("`peers`: name at least one deploy_agent step the agent may delegate to")
        if self.agent in self.peers:
            raise ValueError(f"`peers` names {self.agent!r}, the agent itself: an agent is not its own peer")
        sources = [p.source_agent_name for p in self.peerings]
        if twice := sorted({s for s in sources if sources.count(s) > 1}):
            raise ValueError(f"peerings: source {', '.join(twice)} is listed twice: give each agent one peering")
        return self


def prepare_peer_agents(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    if config.get("agent") is not None:
        config["deployed"] = ref(f"steps.{config['agent']}.outputs")
        config["peers_deployed"] = {p: ref(f"steps.{p}.outputs") for p in config["peers"]}
    if peerings := config.get("peerings"):
        if plan.task is None or plan.step_id is None:
            raise BadInput("peer_agents: peerings name agents within a task", "plan the step as part of a task")
        found = []
        for peering in peerings:
            source = agent_step(plan.task, plan.step_id, peering["source_agent_name"])
            peers = [agent_step(plan.task, plan.step_id, name) for name in peering["peer_agent_names"]]
            if source in peers:
                raise BadInput(f"step {plan.step_id!r}: peerings peer step {source!r} with itself", "name another")
            found.append(
                {
                    "agent": source,
                    "deployed": ref(f"steps.{source}.outputs"),
                    "peers_deployed": {p: ref(f"steps.{p}.outputs") for p in peers},
                }
            )
        config["peerings_deployed"] = found
    return config


@step_type(
    "peer_agents", config=PeerAgentsConfig, timeout="1m", prepare=prepare_peer_agents, step_refs=("agent", "peers")
)
async def peer_agents(ctx: StepContext, config: PeerAgentsConfig) -> JsonObject:
    """Send an agent that declares urn:agentenv:peer-agents/v1 its routing table: the other agents' names, URLs
    and cards. It replaces any table sent before."""
    if config.agent is not None:
        return await _tell(ctx, config.agent, config.deployed, config.peers_deployed)
    told = [
        await _tell(
            ctx, str(p["agent"]), cast(JsonObject, p["deployed"]), cast(dict[str, JsonObject], p["peers_deployed"])
        )
        for p in config.peerings_deployed
    ]
    return {"peerings": told}


async def _tell(ctx: StepContext, step: str, deployed: JsonObject, peers: dict[str, JsonObject]) -> JsonObject:
    name = deployed.get("name", step)
    fix = "serve the extension (our SDK: `peer_agents = True`), or take the step out of the task"
    client = await deployed_extension(ctx, deployed, PEER_AGENTS, step=step, fix=fix)
    sent = await deploy_extras(client, name, peers, lambda url: agent_client(ctx.settings, url, hosted=False).card())
    return {"agent": name, "peers": sent.get("peers", [])}
