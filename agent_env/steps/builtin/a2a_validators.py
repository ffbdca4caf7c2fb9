"""The A2A agent validators as step types (the framework's names): each checks the agent at `url` with a check
of `agent_env.validators` and records its report (outputs `report`, `passed`) and its score (a required
check that failed fails it). `agent-env a2a-agent validate URL` runs them as a task beside a mail environment,
which `verify_a2a_agent_mcp` hands the agent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx
from pydantic import Field

from agent_env import tls
from agent_env.steps import StepConfig, StepContext, StepResult, step_type
from agent_env.steps.builtin.envs import instance_id
from agent_env.validators import a2a_card, a2a_config, a2a_mcp, a2a_modalities, a2a_protocol
from agent_env.validators.report import ValidationReport


class A2AAgentCheck(StepConfig):
    url: str = Field(
        pattern=r"^https?://", description="the agent's A2A URL (its card is at URL/.well-known/agent-card.json)"
    )
    timeout_seconds: float = Field(60, gt=0, le=3600, description="how long one task of the agent may take")


class A2AMcpCheck(A2AAgentCheck):
    env: str = Field(description="the deploy_env step whose environment's MCP server the agent is given")
    role: str = Field("agent", description="the agent's role in it")
    agent_name: str = Field("validated-agent", pattern=r"^[A-Za-z0-9_.@\-]{1,64}$", description="its name in it")
    prompt: str = Field(a2a_mcp.PROMPT, max_length=4000, description="the task asking it to use a tool")


async def _checked(check: Callable[[httpx.AsyncClient], Awaitable[ValidationReport]]) -> StepResult:
    """Run `check` with a client that carries no credential of ours and follows no redirect."""
    async with httpx.AsyncClient(follow_redirects=False, verify=tls.context(), timeout=30) as http:
        report = await check(http)
    return StepResult(outputs={"report": report.model_dump(mode="json"), "passed": report.passed}, score=report.score())


@step_type("verify_a2a_agent_card", config=A2AAgentCheck, timeout="2m", retries=1)
async def verify_a2a_agent_card(ctx: StepContext, config: A2AAgentCheck) -> StepResult:
    """Check an A2A agent's card: the fields A2A requires, and each urn:agentenv extension it declares served."""
    return await _checked(lambda http: a2a_card.verify_agent_card(http, config.url))


@step_type("verify_a2a_core_protocol", config=A2AAgentCheck, timeout="10m", retries=1)
async def verify_a2a_core_protocol(ctx: StepContext, config: A2AAgentCheck) -> StepResult:
    """Check an A2A agent's JSON-RPC: message/send, tasks/get and the spec's error codes."""
    return await _checked(lambda http: a2a_protocol.verify_core_protocol(http, config.url, config.timeout_seconds))


@step_type("verify_a2a_agent_config_identity", config=A2AAgentCheck, timeout="2m", retries=1)
async def verify_a2a_agent_config_identity(ctx: StepContext, config: A2AAgentCheck) -> StepResult:
    """Check agent-config/v1: a set is read back, and a name and description set show on the card."""
    return await _checked(lambda http: a2a_config.verify_config_identity(http, config.url))


@step_type("verify_a2a_role", config=A2AAgentCheck, timeout="2m", retries=1)
async def verify_a2a_role(ctx: StepContext, config: A2AAgentCheck) -> StepResult:
    """Check agent-config/v1 takes a role and reads it back."""
    return await _checked(lambda http: a2a_config.verify_role(http, config.url))


@step_type("verify_a2a_system_prompt", config=A2AAgentCheck, timeout="10m", retries=1)
async def verify_a2a_system_prompt(ctx: StepContext, config: A2AAgentCheck) -> StepResult:
    """Check a system prompt set through agent-config/v1 reaches the agent (it answers with the prompt's token)."""
    return await _checked(lambda http: a2a_config.verify_system_prompt(http, config.url, config.timeout_seconds))


@step_type("verify_a2a_modalities", config=A2AAgentCheck, timeout="10m", retries=1)
async def verify_a2a_modalities(ctx: StepContext, config: A2AAgentCheck) -> StepResult:
    """Check which inputs an A2A agent takes (text, image, PDF): those its card declares must be taken."""
    return await _checked(lambda http: a2a_modalities.verify_modalities(http, config.url, config.timeout_seconds))


@step_type("verify_a2a_agent_mcp", config=A2AMcpCheck, timeout="10m", retries=1, step_refs=("env",))
async def verify_a2a_agent_mcp(ctx: StepContext, config: A2AMcpCheck) -> StepResult:
    """Check that an A2A agent given an MCP server through mcp-config/v1 calls it (the gateway's trajectory)."""
    gateway = await ctx.gateway()
    instance = instance_id(ctx, config.env)
    return await _checked(
        lambda http: a2a_mcp.verify_agent_mcp(
            http,
            config.url,
            gateway,
            instance,
            agent_name=config.agent_name,
            role=config.role,
            prompt=config.prompt,
            deadline_s=config.timeout_seconds,
        )
    )
