"""Validators of an environment as step types (protocol v1, the framework's names): `verify_env_card`,
`verify_env_core_protocol`, `verify_mcp_tool_schema`, `verify_spec_conformance` and the judge
`verify_mcp_env_assessment`. The checks are `agent_env.validators`; each step reports its `ValidationReport`
(output `report`) and scores it, so a required check that fails fails the step's score, not the step: the
verdicts downstream (`validation_gate_aggregator`) still see it.

A validator targets a deployed environment of the run (`env`: the deploy_env step; reached through its
gateway, with a role token of its first agent for the card and MCP, the admin token for the data plane) or an
env server's base URL (`url`: sent no credential).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from pydantic import Field, model_validator

from agent_env.agents.usage import Usage
from agent_env.config import ModelSettings
from agent_env.gateway_client import configured
from agent_env.gateway_client.wire import JsonObject
from agent_env.spec.agent import ModelOverride
from agent_env.spec.run import PlannedConfig
from agent_env.spec.templates import ref
from agent_env.step_types import StepFunction, StepType
from agent_env.steps import PlanContext, StepConfig, StepContext, StepFailed, StepResult, step_type
from agent_env.steps.builtin import judging
from agent_env.stores import in_thread, keys
from agent_env.validators import env_card, env_protocol, mcp_tools, spec_conformance
from agent_env.validators import target as net
from agent_env.validators.report import Finding, ValidationReport

URL = re.compile(r"^https?://[^\s/]+(/\S*)?$")


class EnvTargetConfig(StepConfig):
    framework_names = {"env_id": ("env", "env_step")}

    env: str | None = Field(None, description="the deploy_env step whose environment is checked")
    url: str | None = Field(None, description="or the base URL of an env server (its card at /.well-known/...)")
    agent: str | None = Field(None, description="with env: the agent whose role token reads the card and MCP")
    deployed: JsonObject = Field(default_factory=dict, description="filled in when the run is planned")

    @model_validator(mode="after")
    def _one_target(self) -> EnvTargetConfig:
        if (self.env is None) == (self.url is None):
            raise ValueError("give exactly one of `env` (a deploy_env step) or `url` (an env server's base URL)")
        if self.url is not None and not URL.match(self.url):
            raise ValueError(f"url {self.url!r} is no http(s) URL: give the env server's base, e.g. http://host:port")
        return self


def prepare_target(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    """The deploy step's outputs, resolved by the workflow when this step starts."""
    if config.get("env"):
        config["deployed"] = ref(f"steps.{config['env']}.outputs")
    return config


async def env_target(ctx: StepContext, config: EnvTargetConfig) -> net.EnvTarget:
    if config.url is not None:
        return net.EnvTarget.of_url(config.url)
    deployed = config.deployed
    if not deployed.get("instance") or not deployed.get("gateway"):
        raise StepFailed(f"step {config.env!r} deployed no environment (no instance in its outputs)")
    agents = list(deployed.get("agents") or {})
    agent = config.agent or (agents[0] if agents else None)
    if agent is None:
        raise StepFailed(f"the environment of step {config.env!r} has no agents: give it one (its `agents`)")
    gateway = await ctx.gateway()
    role = {"authorization": f"Bearer {await gateway.token(deployed['instance'], agent)}"}
    admin = {"authorization": f"Bearer {await in_thread(configured.admin_token, ctx.settings)}"}
    base = f"{str(deployed['gateway']).rstrip('/')}/envs/{deployed['instance']}"
    return net.EnvTarget(base=base, card_headers=role, rpc_headers=admin, mcp_headers=role)


def reported(report: ValidationReport, **outputs: Any) -> StepResult:
    return StepResult(
        outputs={"passed": report.passed, "report": report.model_dump(mode="json"), **outputs},
        score=report.score(),
    )


async def _card(target: net.EnvTarget) -> Any:
    card, _ = await env_card.fetch_card(target)
    return card


def validator(name: str, config: type[EnvTargetConfig] = EnvTargetConfig) -> Callable[[StepFunction], StepType]:
    """The step type of a validator over HTTP: a target, its deploy step resolved at plan time."""
    return step_type(name, config=config, prepare=prepare_target, step_refs=("env",), timeout="2m", retries=1)


@validator("verify_env_card")
async def verify_env_card(ctx: StepContext, config: EnvTargetConfig) -> StepResult:
    """Check the environment card is protocol v1's: required fields, camelCase keys, operations, tools."""
    report, card = await env_card.verify_card(await env_target(ctx, config))
    return reported(report, card=card)


class CoreProtocolConfig(EnvTargetConfig):
    mutating: bool = Field(True, description="also call data/reset (it empties the environment)")


@validator("verify_env_core_protocol", CoreProtocolConfig)
async def verify_env_core_protocol(ctx: StepContext, config: CoreProtocolConfig) -> StepResult:
    """Check the JSON-RPC data plane: error codes with HTTP 200, data/add probe, data/reset, operations."""
    target = await env_target(ctx, config)
    report = await env_protocol.verify_protocol(target, await _card(target), mutating=config.mutating)
    return reported(report)


@validator("verify_mcp_tool_schema")
async def verify_mcp_tool_schema(ctx: StepContext, config: EnvTargetConfig) -> StepResult:
    """Check the tools over MCP are the card's, with valid and matching input schemas."""
    target = await env_target(ctx, config)
    report = await mcp_tools.verify_tools(target, await _card(target))
    return reported(report)


@validator("verify_spec_conformance")
async def verify_spec_conformance(ctx: StepContext, config: EnvTargetConfig) -> StepResult:
    """Check the env's OpenAPI document (if it serves one) against its MCP tools; skipped without one."""
    target = await env_target(ctx, config)
    report, skipped = await spec_conformance.verify_conformance(target, await _card(target))
    return reported(report, skipped=skipped is not None, **({"reason": skipped} if skipped else {}))


# -- the judge --

ASSESS = (
    "The tool {quoted} is fit for an agent to use: its description says what it does and its input schema "
    "names and types every argument that description needs; where the material shows it being called, it "
    "behaved as described (an invalid input got a clear error, not a crash or silent loss)."
)


class AssessmentConfig(EnvTargetConfig):
    framework_names = {**EnvTargetConfig.framework_names, "prompt_id": ("transcripts", "prompt_steps")}

    transcripts: list[str] = Field(
        default_factory=list,
        description="prompt_agent steps in which an agent exercised the tools (the judge reads them)",
    )
    instructions: str = Field("", description="what the judge should know beyond the tools")
    judge: str | None = Field(None, description="a deploy_agent step whose agent judges (default: [models.judge])")
    judge_model: ModelOverride | None = Field(None, description="another endpoint or model for this judge")
    attempts: int = Field(3, ge=1, le=10)
    model: ModelSettings | None = Field(None, description="filled in when the run is planned")
    judge_deployed: JsonObject = Field(default_factory=dict, description="filled in when the run is planned")


def prepare_assessment(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    return judging.prepare_judge(prepare_target(config, plan), plan)


@step_type(
    "verify_mcp_env_assessment",
    config=AssessmentConfig,
    prepare=prepare_assessment,
    step_refs=("env", "judge", "transcripts"),
    timeout="20m",
    retries=1,
)
async def verify_mcp_env_assessment(ctx: StepContext, config: AssessmentConfig) -> StepResult:
    """A judge (model or agent) assesses each MCP tool: described, typed, and working where it was exercised."""
    target = await env_target(ctx, config)
    report = ValidationReport(validator="verify_mcp_env_assessment", target=target.base)
    try:
        _, tools = await mcp_tools.list_mcp_tools(target, await _card(target))
    except mcp_tools.McpUnreachable as e:
        report.checks.append(Finding.failed("mcp.served", f"could not list tools over MCP at {e}", "serve MCP"))
        return reported(report)
    if not tools:
        report.checks.append(Finding.failed("assessment.tools", "MCP lists no tools", "serve the env's tools"))
        return reported(report)
    material: JsonObject = {
        "tools": [{"name": t.name, "description": t.description, "inputSchema": t.input_schema} for t in tools]
    }
    if config.instructions:
        material["instructions"] = config.instructions
    for step in config.transcripts:
        key = keys.transcript(ctx.run_id, step)
        if not await ctx.stores.aio.objects.exists(key):
            raise StepFailed(f"step {step!r} left no transcript (is it a prompt_agent step that ran?)")
        doc = json.loads(await ctx.stores.aio.objects.get(key))
        material.setdefault("transcripts", {})[step] = {
            "messages": [{"speaker": m["speaker"], "text": m["text"]} for m in doc["messages"]],
            "tool_calls": doc["tool_calls"],
        }
    ids = {f"tool-{n}": t.name for n, t in enumerate(tools, 1)}
    criteria = [{"id": i, "description": ASSESS.format(quoted=f"'{name}'")} for i, name in ids.items()]
    judge = judging.Judging(attempts=config.attempts, model=config.model, judge_deployed=config.judge_deployed)
    used: Usage = {}
    verdicts, asked = await judging.judge(ctx, judge, {"criteria": criteria, "material": material}, used)
    for verdict in verdicts:
        name = ids[verdict["id"]]
        report.checks.append(
            Finding.ok(f"assessment.{name}")
            if verdict["verdict"] == "pass"
            else Finding.failed(f"assessment.{name}", verdict.get("reason") or "the judge failed it", "see the reason")
        )
    return reported(report, asked=asked, **({"usage": used} if used else {}))
