"""The A2A agent validators as step types (the framework's names): each checks the agent at `url` with a check
of `agent_env.validators` and records its report (outputs `report`, `passed`) and its score (a required
check that failed fails it). `agent-env a2a-agent validate URL` runs them as a task beside a mail environment,
which `verify_a2a_agent_mcp` hands the agent.

One shape for all (`a2a_validator`): a config model, and a check given the step's `Checking` (its context, its
config, an HTTP client that carries no credential of ours and follows no redirect). The extension validators
(`a2a_extension_validators`) are made the same way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import httpx
from pydantic import Field

from agent_env import tls
from agent_env.agents.client import AgentClient
from agent_env.errors import BadInput
from agent_env.steps import StepConfig, StepContext, StepResult, StepType, step_type
from agent_env.steps.builtin.a2a_validator_links import LINKED_STEPS, LinkedChecks, linked_findings, prepare_links
from agent_env.steps.builtin.envs import instance_id
from agent_env.stores import in_thread
from agent_env.stores.grant_issuers import object_grants
from agent_env.stores.local_grants import LocalGrants
from agent_env.stores.local_tls import trust_bundle
from agent_env.validators import a2a_card, a2a_config, a2a_mcp, a2a_modalities, a2a_protocol
from agent_env.validators.a2a_object_checks import GrantRoom, Room, outside_a_run
from agent_env.validators.report import ValidationReport


class A2AAgentCheck(LinkedChecks):
    refused_fields = {
        "a2a_agent_version": "the agent checked is the one its deploy_agent step deployed (`a2a_agent_id` names "
        "that step's agent); which version of it is the run's plan's, pinned there, not the validator's",
        "poll_interval_seconds": "this check waits on no long task of the agent's (verify_a2a_system_prompt and "
        "verify_a2a_agent_mcp take it)",
        "skill_bundle_object_url": "only verify_a2a_skill_config adds a skill bundle",
    }

    timeout_seconds: float = Field(60, gt=0, le=3600, description="how long one task of the agent may take")


class PolledCheck(A2AAgentCheck):
    refused_fields = {k: v for k, v in A2AAgentCheck.refused_fields.items() if k != "poll_interval_seconds"}

    poll_interval_seconds: float = Field(
        0.2, gt=0, le=60, description="how long to wait between tasks/get while the agent's task is not final"
    )


class A2AMcpCheck(PolledCheck):
    # (`agent_name` is the agent's name in the environment here, as the framework's deploy_agent says it)
    framework_names = {k: v for k, v in LinkedChecks.framework_names.items() if k != "agent_name"}

    env: str = Field(description="the deploy_env step whose environment's MCP server the agent is given")
    role: str = Field("agent", description="the agent's role in it")
    agent_name: str = Field("validated-agent", pattern=r"^[A-Za-z0-9_.@\-]{1,64}$", description="its name in it")
    prompt: str = Field(a2a_mcp.PROMPT, max_length=4000, description="the task asking it to use a tool")


@dataclass
class Checking:
    """What a validator's check is given: the step's context (None when called outside a run), its config, and
    the HTTP client to reach the agent with."""

    ctx: StepContext | None
    config: Any
    http: httpx.AsyncClient

    @cached_property
    def url(self) -> str:
        return str(self.config.agent_url())

    @cached_property
    def agent(self) -> AgentClient:
        return AgentClient(self.url, self.http)

    async def room(self) -> Room:
        """Grants on the run's object store, under this step's own prefix (or why there are none)."""
        if self.ctx is None:
            return await outside_a_run()
        ctx = self.ctx
        try:  # (in a thread: the local store's grant server starts with its first grants)
            grants = await in_thread(object_grants, ctx.stores.objects, ctx.settings)
        except BadInput as e:
            return f"the run's object store issues no grants: {e.problem}"
        trust = ""
        if isinstance(grants, LocalGrants):  # (its CA is this install's: no agent trusts it unless told)
            bundle = await in_thread(trust_bundle, ctx.settings.state_dir / "tls")
            trust = f"trust this install's grant server with SSL_CERT_FILE={bundle}"
        return GrantRoom(grants, ctx.stores, f"runs/{ctx.run_id}/validators/{ctx.step_id}/", trust)


Check = Callable[[Checking], Awaitable[ValidationReport]]


def a2a_validator(
    name: str,
    check: Check,
    doc: str,
    *,
    config: type[StepConfig] = A2AAgentCheck,
    timeout: str = "2m",
    retries: int = 1,
    step_refs: tuple[str, ...] = (),
) -> StepType:
    """The step type `name`: runs `check` and returns its report (with what the steps it names say) as outputs
    and score."""

    async def run(ctx: StepContext, cfg: Any) -> StepResult:
        async with httpx.AsyncClient(follow_redirects=False, verify=tls.context(), timeout=30) as http:
            report = await check(Checking(ctx, cfg, http))
        report.checks += linked_findings(cfg)
        return StepResult(
            outputs={"report": report.model_dump(mode="json"), "passed": report.passed}, score=report.score()
        )

    run.__doc__ = doc
    refs = step_refs + LINKED_STEPS
    return step_type(name, config=config, timeout=timeout, retries=retries, step_refs=refs, prepare=prepare_links)(run)


verify_a2a_agent_card = a2a_validator(
    "verify_a2a_agent_card",
    lambda c: a2a_card.verify_agent_card(c.http, c.url),
    "Check an A2A agent's card: the fields A2A requires, and each urn:agentenv extension it declares served.",
)
verify_a2a_core_protocol = a2a_validator(
    "verify_a2a_core_protocol",
    lambda c: a2a_protocol.verify_core_protocol(c.http, c.url, c.config.timeout_seconds),
    "Check an A2A agent's JSON-RPC: message/send, tasks/get and the spec's error codes.",
    timeout="10m",
)
verify_a2a_agent_config_identity = a2a_validator(
    "verify_a2a_agent_config_identity",
    lambda c: a2a_config.verify_config_identity(c.http, c.url),
    "Check agent-config/v1: a set is read back, and a name and description set show on the card.",
)
verify_a2a_role = a2a_validator(
    "verify_a2a_role",
    lambda c: a2a_config.verify_role(c.http, c.url),
    "Check agent-config/v1 takes a role and reads it back.",
)
verify_a2a_system_prompt = a2a_validator(
    "verify_a2a_system_prompt",
    lambda c: a2a_config.verify_system_prompt(c.http, c.url, c.config.timeout_seconds, c.config.poll_interval_seconds),
    "Check a system prompt set through agent-config/v1 reaches the agent (it answers with the prompt's token).",
    config=PolledCheck,
    timeout="10m",
)
verify_a2a_modalities = a2a_validator(
    "verify_a2a_modalities",
    lambda c: a2a_modalities.verify_modalities(c.http, c.url, c.config.timeout_seconds),
    "Check which inputs an A2A agent takes (text, image, PDF): those its card declares must be taken.",
    timeout="10m",
)


async def _agent_mcp(c: Checking) -> ValidationReport:
    assert c.ctx is not None, "verify_a2a_agent_mcp runs in a run: it deploys nothing itself"
    return await a2a_mcp.verify_agent_mcp(
        c.http,
        c.url,
        await c.ctx.gateway(),
        instance_id(c.ctx, c.config.env),
        agent_name=c.config.agent_name,
        role=c.config.role,
        prompt=c.config.prompt,
        deadline_s=c.config.timeout_seconds,
        poll_s=c.config.poll_interval_seconds,
    )


verify_a2a_agent_mcp = a2a_validator(
    "verify_a2a_agent_mcp",
    _agent_mcp,
    "Check that an A2A agent given an MCP server through mcp-config/v1 calls it (the gateway's trajectory).",
    config=A2AMcpCheck,
    timeout="10m",
    step_refs=("env",),
)
