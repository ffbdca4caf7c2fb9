"""The A2A agent extension validators as step types (the framework's names): `verify_a2a_peer_agents`,
`verify_a2a_install`, `verify_a2a_skill_config`, `verify_a2a_snapshot`, `verify_a2a_trajectory`.

Each checks the agent at `url` over HTTP (checks in `agent_env.validators.a2a_extensions` and
`a2a_extension_tasks`), with no credential of ours; its score is the report's (a required check that fails
fails the step), its outputs `report` (the ValidationReport: each check with its problem and fix, as
`agent-env a2a-agent validate` prints it) and `passed`. A validator whose extension the card does not declare reports one
optional finding, `<extension>.declared`, and passes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx
from pydantic import Field

from agent_env import tls
from agent_env.agents.client import AgentClient
from agent_env.steps import StepConfig, StepContext, StepResult, step_type
from agent_env.validators.a2a_extension_tasks import TRAJECTORY_PROMPT, verify_snapshot, verify_trajectory
from agent_env.validators.a2a_extensions import verify_install, verify_peer_agents, verify_skill_config
from agent_env.validators.report import ValidationReport


class A2AAgentUrl(StepConfig):
    url: str = Field(
        pattern=r"^https?://", description="the agent's A2A URL (its card is at URL/.well-known/agent-card.json)"
    )


class TrajectoryValidation(A2AAgentUrl):
    prompt: str = Field(TRAJECTORY_PROMPT, min_length=1, max_length=4000, description="the task's turn")
    timeout_seconds: float = Field(120.0, gt=0, le=3600, description="how long the agent may take to answer it")


async def _validate(url: str, check: Callable[[AgentClient], Awaitable[ValidationReport]]) -> StepResult:
    async with httpx.AsyncClient(verify=tls.context(), follow_redirects=False, timeout=30.0) as http:
        report = await check(AgentClient(url, http))
    return StepResult(outputs={"report": report.model_dump(mode="json"), "passed": report.passed}, score=report.score())


@step_type("verify_a2a_peer_agents", config=A2AAgentUrl, timeout="3m", retries=0)
async def verify_a2a_peer_agents(ctx: StepContext, config: A2AAgentUrl) -> StepResult:
    """Validate an agent's peer-agents/v1: set a probe peer, list shows it (then its peers are set back)."""
    return await _validate(config.url, verify_peer_agents)


@step_type("verify_a2a_install", config=A2AAgentUrl, timeout="1m", retries=0)
async def verify_a2a_install(ctx: StepContext, config: A2AAgentUrl) -> StepResult:
    """Validate an agent's install/v1 declaration: commands, the parameters they use, its port."""
    return await _validate(config.url, verify_install)


@step_type("verify_a2a_skill_config", config=A2AAgentUrl, timeout="3m", retries=0)
async def verify_a2a_skill_config(ctx: StepContext, config: A2AAgentUrl) -> StepResult:
    """Validate an agent's skill-config/v1: add an inline probe skill, list shows it."""
    return await _validate(config.url, verify_skill_config)


@step_type("verify_a2a_snapshot", config=A2AAgentUrl, timeout="3m", retries=0)
async def verify_a2a_snapshot(ctx: StepContext, config: A2AAgentUrl) -> StepResult:
    """Validate an agent's snapshot/v1: declared, save and load served (the round trip needs object grants)."""
    return await _validate(config.url, verify_snapshot)


@step_type("verify_a2a_trajectory", config=TrajectoryValidation, timeout="65m", retries=0)
async def verify_a2a_trajectory(ctx: StepContext, config: TrajectoryValidation) -> StepResult:
    """Validate an agent's trajectory/v1: after one task, get answers a well-formed trajectory of it."""

    async def check(agent: AgentClient) -> ValidationReport:
        return await verify_trajectory(agent, prompt=config.prompt, deadline_s=config.timeout_seconds)

    return await _validate(config.url, check)
