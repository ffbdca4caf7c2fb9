"""`add_skills`, the framework's: give a deployed a2a agent skills mid-run, through its
`urn:agentenv:skill-config/v1` (the same call deploy_agent makes for a record's `skills`).

A skill is the framework's inline form: `name`, `description`, `body` and the optional frontmatter fields
(`license`, `compatibility`, `metadata`, `allowed_tools`), sent as one SKILL.md. `agent_name` is the agent as the
task deploys it (a deploy_agent step's `as`, else its agent's name). Skills held in the object store
(`object_url`, `skill_artifact_id`), `cli_artifact_ids` and `file_artifact_universe_ids` are not supported yet
and are refused by name. An agent that already has a skill of the name (a 409) counts as done, so a retry is safe.
"""

from __future__ import annotations

import json

from pydantic import Field, model_validator

from agent_env.agents.client import agent_client
from agent_env.agents.extensions import SKILL_CONFIG, ExtensionRefused
from agent_env.errors import BadInput
from agent_env.gateway_client.wire import JsonObject
from agent_env.spec.agent import InlineSkill
from agent_env.spec.run import PlannedConfig
from agent_env.spec.task import upstream
from agent_env.steps import PlanContext, StepConfig, StepContext, StepFailed, step_type

_NOT_YET = ("object_url", "skill_artifact_id", "skill_artifact_version")


class SkillGiven(StepConfig):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    description: str = Field(min_length=1, max_length=1024)
    body: str = Field("", max_length=90_000, description="the SKILL.md's text below its frontmatter")
    license: str | None = None
    compatibility: str | None = None
    metadata: dict[str, str] | None = None
    allowed_tools: str | None = None
    object_url: str | None = None
    skill_artifact_id: str | None = None
    skill_artifact_version: int | None = None

    @model_validator(mode="after")
    def _inline(self) -> SkillGiven:
        for field in _NOT_YET:
            if getattr(self, field) is not None:
                raise ValueError(f"`{field}`: skills from the object store are not supported yet; give `body` inline")
        return self

    def skill_md(self) -> str:
        """Frontmatter (each value as JSON, which YAML reads as written) and the body."""
        fields = {
            "name": self.name,
            "description": self.description,
            "license": self.license,
            "compatibility": self.compatibility,
            "metadata": self.metadata,
            "allowed-tools": self.allowed_tools,
        }
        lines = [f"{key}: {json.dumps(value)}" for key, value in fields.items() if value is not None]
        return "---\n" + "\n".join(lines) + "\n---\n" + self.body


class AddSkillsConfig(StepConfig):
    skills: list[SkillGiven] = Field(default_factory=list, description="skills, each inline")
    agent_name: str = Field(min_length=1, description="the agent as a deploy_agent step of this task names it")
    cli_artifact_ids: list[str] = Field(default_factory=list, description="not supported yet")
    file_artifact_universe_ids: list[str] = Field(default_factory=list, description="not supported yet")
    deployed: JsonObject | str | None = Field(None, description="filled in when the run is planned")

    @model_validator(mode="after")
    def _some(self) -> AddSkillsConfig:
        for field in ("cli_artifact_ids", "file_artifact_universe_ids"):
            if getattr(self, field):
                raise ValueError(f"`{field}`: skills made from loaded artifacts are not supported yet; give `skills`")
        if not self.skills:
            raise ValueError("give at least one skill in `skills`")
        return self


def _agent_name(config: JsonObject) -> object:
    record = config.get("record")
    return config.get("as") or config.get("as_") or config.get("agent") or (record or {}).get("name")


def prepare_add_skills(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    task, name = plan.task, config.get("agent_name")
    if task is None:
        raise BadInput("add_skills: agent_name is resolved within a task", "plan the step as part of a task")
    deploys = [s.id for s in task.steps if s.type == "deploy_agent" and _agent_name(s.config) == name]
    if len(deploys) != 1:
        raise BadInput(
            f"step {plan.step_id!r}: agent_name {name!r} is deployed by {len(deploys)} deploy_agent steps",
            "name an agent one deploy_agent step of the task deploys (its `as`, else its agent's name)",
        )
    if deploys[0] not in upstream(str(plan.step_id), {s.id: s.depends_on for s in task.steps}):
        raise BadInput(f"step {plan.step_id!r} does not come after {deploys[0]!r}", "add it to its depends_on")
    config["deployed"] = f"${{steps.{deploys[0]}.outputs}}"
    return config


@step_type("add_skills", config=AddSkillsConfig, timeout="5m", prepare=prepare_add_skills)
async def add_skills(ctx: StepContext, config: AddSkillsConfig) -> JsonObject:
    """Give a deployed a2a agent skills (inline SKILL.md) through its skill-config/v1."""
    deployed = config.deployed if isinstance(config.deployed, dict) else {}
    if not deployed.get("url") or deployed.get("hosted"):
        raise StepFailed(f"agent {config.agent_name!r} is not an a2a agent of its own: it takes no skill-config/v1")
    try:
        client = await agent_client(ctx.settings, str(deployed["url"]), hosted=False).extensions()
    except Exception as e:  # noqa: BLE001 - the agent may be restarting: retried
        raise StepFailed(f"agent {config.agent_name!r} did not answer with its card ({e})", retryable=True) from None
    if not client.has(SKILL_CONFIG):
        raise StepFailed(f"agent {config.agent_name!r} declares no {SKILL_CONFIG} on its card: it takes no skills")
    skills = [InlineSkill(name=s.name, description=s.description, skill_md=s.skill_md()) for s in config.skills]
    try:
        await client.configure(mcp=None, config={}, skills=skills)
    except ExtensionRefused as e:
        raise StepFailed(str(e)) from None
    return {"agent_name": config.agent_name, "added": [s.name for s in skills]}
