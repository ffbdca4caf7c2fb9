"""Bringing an agent into a run: the `deploy_agent` step.

The built-in types are hosted by the gateway at `/agents/<run id>.<step id>/`; an `a2a` agent is yours, at its
own URL or started in a sandbox for the run; a `cli` agent runs a coding CLI in a sandbox. What the agent needs is
pinned when the run is planned (its record, model endpoints, build context, skills) and checked then, so a missing
key fails before the run starts. The framework's fields that shape the deployment (the agent's sandbox, prompt,
description, skills, registry version, a snapshot artifact) are `agent_deploy_fields`'; a sandboxed agent is started
by `agent_sandbox_start`. Talking to it afterwards is `agents.prompt_agent`.
"""

from __future__ import annotations

import re
from typing import Any, cast

from pydantic import ConfigDict, Field, ValidationError, ValidationInfo, model_validator

from agent_env.agents.extensions import ExtensionClient
from agent_env.agents.host import MAX_SKILLS
from agent_env.agents.models import check_endpoint, resolve_key
from agent_env.agents.transfers import TransferFailed, add_skill_bundles
from agent_env.bundles import find_agent
from agent_env.config import ModelSettings
from agent_env.errors import AgentEnvError, BadInput
from agent_env.gateway_client import GatewayClient, GatewayRefused
from agent_env.gateway_client.wire import JsonObject
from agent_env.providers import apps
from agent_env.spec.agent import AgentRecord, CliConfig, InlineSkill
from agent_env.spec.env import AgentSandbox
from agent_env.spec.run import PlannedConfig, agent_in_sandbox
from agent_env.spec.templates import ref
from agent_env.steps import PlanContext, StepContext, StepFailed, step_type
from agent_env.steps.builtin.agent_changelog import changelog_on_deploy
from agent_env.steps.builtin.agent_deploy_fields import (
    FrameworkDeployFields,
    apply_to_plan,
    inline_skills,
    model_override,
    registry_agent,
    requested,
)
from agent_env.steps.builtin.agent_extensions import RUN_USES, deploy_extras
from agent_env.steps.builtin.agent_in_sandbox import start_in_deployed_sandbox
from agent_env.steps.builtin.agent_sandbox_start import start_agent_sandbox
from agent_env.steps.builtin.envs import instance_id
from agent_env.steps.builtin.sandbox_steps import pin_skills
from agent_env.stores import in_thread, open_secrets
from agent_env.stores.grant_issuers import object_grants

PURPOSES = {"llm": "agent", "persona": "persona", "cli": "agent"}
_CAPTURE = re.compile(r"runs/[^/]+/agent_changelog/[^/]+/?")


def agent_id(ctx: StepContext, step: str) -> str:
    return f"{ctx.run_id}.{step}"


class DeployAgentConfig(FrameworkDeployFields):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    framework_names = {
        "a2a_agent_id": ("agent", "same"),
        "a2a_agent_version": ("agent_version", "same"),
        "agent_name": ("as", "same"),
        "sandbox_type": ("provider", "same"),
        "env_ids": ("env", "env_steps"),
        "env_step_id": ("env", "same"),
    }
    refused_fields = {
        "enable_docker": "no provider here runs a Docker daemon inside an agent's sandbox (the framework's is "
        "rootless Docker in a VM sandbox) — build what the agent needs into its sandbox's image",
    }
    agent: str | None = Field(None, description="an agent of the bundle (agents/NAME/agent.toml)")
    record: AgentRecord | None = Field(
        None, description="the agent's record inline (filled in from `agent` when the run is planned)"
    )
    env: str | None = Field(None, description="the deploy_env step whose environment the agent works in")
    as_: str | None = Field(
        None,
        alias="as",
        pattern=r"^[A-Za-z0-9_.@\-]{1,64}$",
        description="its name in the environment (default: the agent's name)",
    )
    role: str | None = Field(None, description="its role there (default: the record's role)")
    models: dict[str, ModelSettings] = Field(default_factory=dict, description="filled in when the run is planned")
    provider: str | None = Field(
        None,
        description='sandbox provider (or chain, "docker,local") for a sandboxed '
        "a2a agent; default: the agent's, then [sandboxes] agents",
    )
    build: str | None = Field(
        None, description="filled in when the run is planned: a sandboxed agent's build context's object key"
    )
    skill_files: dict[str, str] = Field(
        default_factory=dict, description="filled in when the run is planned: its skills' files, path -> object key"
    )
    agent_snapshot: str | None = Field(
        None, description="restore the agent from a snapshot_agent_state snapshot (its name in this run, or its key)"
    )
    agent_snapshot_target_context_id: str | None = Field(
        None, description="the conversation the agent restores it as (default: one it picks, in the outputs)"
    )
    enable_agent_changelog: bool = Field(
        False,
        description="the agent writes an increment of its state after each turn under runs/RUN/agent_changelog/NAME/ "
        "(urn:agentenv:snapshot/v1's changelog feature)",
    )
    agent_changelog_object_url: str | None = Field(
        None,
        description="replay this changelog (an earlier run's `agent_changelog.changelog`, "
        "runs/RUN/agent_changelog/NAME/) into the agent",
    )
    agent_changelog_toolcall_position_exclusive: int | None = Field(
        None, ge=0, description="replay only the increments before this position (default: all)"
    )
    sandbox_name: str | None = Field(
        None, description="serve the agent in this deploy_sandbox step's sandbox (a local vm one), not its own"
    )
    sandbox_deployed: JsonObject | None = Field(
        None, description="filled in when the run is planned: a reference to that deploy_sandbox step's outputs"
    )
    peers: list[str] = Field(
        default_factory=list,
        description="deploy_agent steps whose agents it may delegate to, sent through urn:agentenv:peer-agents/v1",
    )
    peers_deployed: dict[str, JsonObject] = Field(
        default_factory=dict, description="filled in when the run is planned: references to the peers' outputs"
    )

    @model_validator(mode="after")
    def _known(self, info: ValidationInfo) -> DeployAgentConfig:
        if (self.agent is None) == (self.record is None):
            if self.agent is not None and self.record is not None and self.record.name == self.agent:
                return self  # as planned: the record inlined
            raise ValueError("give `agent` (an agent of the bundle) or `record` (inline), not both")
        if self.agent_changelog_toolcall_position_exclusive is not None and not self.agent_changelog_object_url:
            raise ValueError("agent_changelog_toolcall_position_exclusive needs agent_changelog_object_url")
        source = self.agent_changelog_object_url
        if source and "${" not in source and not _CAPTURE.fullmatch(source):  # only a capture: no other object
            raise ValueError(
                f"agent_changelog_object_url {source!r} is not a changelog's prefix: give "
                "runs/RUN/agent_changelog/NAME/ (a deploy_agent's outputs.agent_changelog.changelog)"
            )
        if self.record is None and self.agent_version is None:  # (a registry version is found when planned)
            try:
                find_agent((info.context or {}).get("bundle"), cast(str, self.agent))  # (no record: an agent)
            except AgentEnvError as e:
                raise ValueError(str(e).replace("\n  fix:", " —")) from None
        return self


def prepare_deploy_agent(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    """Pin the agent's record and the model endpoints it will use in the run; check they are usable
    now (a missing API key fails here, before the run starts, not minutes into it)."""
    if config.get("record"):
        record, folder = AgentRecord.model_validate(config["record"]), None
    elif config.get("agent_version") is not None:
        record, folder = registry_agent(plan, config["agent"], int(config["agent_version"]))
    else:
        record, folder = find_agent(plan.bundle, config["agent"], with_folder=True)
    record = apply_to_plan(config, record, plan)
    config["record"] = record.model_dump(mode="json")
    config["agent"] = record.name
    if config.get("peers"):
        if record.type not in ("a2a", "cli"):
            raise BadInput(
                f"agent {record.name!r} ({record.type}) has `peers`: peers go to agents that serve "
                "urn:agentenv:peer-agents/v1 (a2a and cli agents)",
                "remove `peers`, or deploy an a2a agent that serves the extension",
            )
        config["peers_deployed"] = {p: ref(f"steps.{p}.outputs") for p in config["peers"]}
    box = agent_sandbox(record)
    if box is not None:
        given = box.model_copy(update={"env": {**box.env, **(config.get("env_vars") or {})}})
        apps.check_secrets(plan.settings, given, f"agent {record.name!r}")
    if box is not None and box.build and not config.get("build"):
        if folder is None:
            raise BadInput(
                f"agent {record.name!r}: its sandbox's `build` folder is relative to the agent's folder, "
                "and an inline record has none",
                "put the agent in the bundle (agents/NAME/agent.toml), or give its sandbox an `image` or a `command`",
            )
        config["build"] = apps.pin_build(plan.stores, folder, box.build)  # every worker builds the very same context
    inline = [s for s in config.get("skills") or [] if not isinstance(s, str)]
    if record.skills or inline:
        unread = {  # why these agents take no skills, and the fix
            "human": ("a person reads their `instructions`", "put what they need in `instructions`"),
            "trainer": ("a trainer's own loop prompts its model, not the run", "give them to the trainer's model"),
        }
        if record.type in unread:
            why, fix = unread[record.type]
            raise BadInput(
                f"agent {record.name!r} ({record.type}) has skills: skills go to agents that run a model — llm and "
                "persona agents (in their model's system prompt), a2a and cli agents (as files in a sandboxed agent's "
                "sandbox, and through urn:agentenv:skill-config/v1 when its card declares it); scripted agents play "
                f"their script without them; {why}",
                f"remove `skills`: {fix}",
            )
        if record.type not in ("a2a", "cli") and (count := len(record.skills) + len(inline)) > MAX_SKILLS:
            raise BadInput(
                f"agent {record.name!r} has {count} skills; a hosted agent takes at most {MAX_SKILLS} "
                "(each SKILL.md goes into its model's system prompt)",
                "give it fewer skills, or merge some",
            )
        config["skill_files"] = pin_skills(plan, record.skills)
    models = {}
    if record.needs_model():
        purpose = PURPOSES[record.type]
        endpoint = plan.settings.model(purpose, model_override(record, config.get("litellm_base_url")))
        check_endpoint(endpoint, purpose, open_secrets(plan.settings))
        models[purpose] = endpoint.model_dump(mode="json")
    config["models"] = models
    return config


def agent_sandbox(record: AgentRecord) -> AgentSandbox | None:
    """The sandbox an a2a agent (if it is not at a URL of its own) or a cli agent runs in."""
    return record.sandbox()


def quick_deploy_agent(config: PlannedConfig) -> bool:
    """A card check or a registration on the gateway: a local activity. A sandbox may have an image to
    build first: a normal, heartbeating activity."""
    return not agent_in_sandbox(config)


@step_type(
    "deploy_agent",
    config=DeployAgentConfig,
    timeout="5m",
    prepare=prepare_deploy_agent,
    quick=quick_deploy_agent,
    step_refs=("env", "peers"),
    deploys_agent=True,
    sandboxes=agent_in_sandbox,
)
async def deploy_agent(ctx: StepContext, config: DeployAgentConfig) -> JsonObject:
    """Bring an agent in: give it its role in the environment and start serving it (or check yours answers)."""
    from agent_env.agents.client import AgentReplyInvalid, agent_client, forget_agent

    record = cast(AgentRecord, config.record)  # pinned when the run is planned
    name = config.as_ or record.name
    role = config.role or record.role
    gateway = await ctx.gateway()
    instance = instance_id(ctx, config.env) if config.env else None
    if instance is not None:
        try:
            if role is not None:
                await gateway.set_agent_role(instance, name, role)
            else:  # the role the environment gives it
                agents = (await gateway.get_instance(instance))["agents"]
                if name not in agents:
                    raise StepFailed(
                        f"agent {name!r} has no role in environment {config.env!r} (its agents: "
                        f"{', '.join(agents) or 'none'}) — give the step a `role`"
                    )
                role = agents[name]
        except GatewayRefused as e:
            raise StepFailed(f"agent {name!r}: {e}") from None
    if record.type == "trainer":  # played from a trainer's loop: its turns are offered by the run itself
        return {
            "agent": record.name,
            "type": record.type,
            "name": name,
            "role": role,
            "env": instance,
            "url": None,
            "hosted": False,
            "trainer": True,
            "mcp_url": f"{await gateway.url_for(instance)}/envs/{instance}/mcp" if instance else None,
        }
    sandbox, image_id, asked = None, None, requested(config, False)  # (a hosted agent's sizes: recorded only)
    if (box := agent_sandbox(record)) is not None:
        start = start_in_deployed_sandbox if config.sandbox_name else start_agent_sandbox
        sandbox, url, asked = await start(ctx, config, record, box)
        image_id = sandbox.pop("image_id", None)  # the exact image it ran, for the run's record
        hosted = False
    elif record.type == "a2a":
        url = record.typed_config().url
        forget_agent(url)  # its card is read as the run brings it in: it may have changed, or another agent has the URL
        client = agent_client(ctx.settings, url, hosted=False)
        try:
            await client.card()
        except AgentReplyInvalid as e:  # a card pointing elsewhere: refused, and asking again will not help
            forget_agent(url)
            raise StepFailed(str(e)) from None
        except Exception as e:  # noqa: BLE001 - unreachable agents may still be starting: retried
            raise StepFailed(str(e), retryable=True) from None
        hosted = False
    else:
        secrets = await in_thread(open_secrets, ctx.settings)
        keys = await in_thread(lambda: {p: k for p, m in config.models.items() if (k := resolve_key(m, secrets))})
        try:  # the SKILL.md texts are read here, in the activity: they go to the gateway, never into history
            skills = await in_thread(_artifact_skills, ctx, config.skill_files)
        except ValidationError as e:
            raise StepFailed(
                f"agent {record.name!r}: one of its skills ({', '.join(record.skills)}) cannot be given to it: "
                f"{e.errors()[0]['msg']} (a SKILL.md holds at most 100,000 characters)"
            ) from None
        await gateway.put_agent(
            {
                "id": agent_id(ctx, ctx.step_id),
                "run_id": ctx.run_id,
                "record": record.model_dump(mode="json"),
                "models": {p: m.model_dump(mode="json") for p, m in config.models.items()},
                "keys": keys,
                "skills": [s.model_dump(mode="json") for s in skills + inline_skills(config.skills)],
            }
        )
        url = f"{await gateway.agent_url_base(agent_id(ctx, ctx.step_id))}/agents/{agent_id(ctx, ctx.step_id)}/"
        hosted = True
    mcp_url = f"{await gateway.url_for(instance)}/envs/{instance}/mcp" if instance else None
    extensions, extras = (
        await _configure(ctx, gateway, record, url, instance, name, mcp_url, config)
        if record.type in ("a2a", "cli")
        else ([], {})
    )
    restored = None
    if config.agent_snapshot:  # snapshot/v1 load, with grants on the run's object store
        from agent_env.steps.builtin.agent_state import restore_agent_state

        deployed = {"agent": record.name, "name": name, "url": url, "hosted": hosted}
        target = config.agent_snapshot_target_context_id
        restored = await restore_agent_state(ctx, deployed, config.agent_snapshot, target)
    changelog = await changelog_on_deploy(
        ctx,
        {"agent": record.name, "name": name, "url": url, "hosted": hosted},
        enable=config.enable_agent_changelog,
        source=config.agent_changelog_object_url,
        before=config.agent_changelog_toolcall_position_exclusive,
        target_context_id=config.agent_snapshot_target_context_id,
    )
    return {
        "agent": record.name,
        "type": record.type,
        "name": name,
        "role": role,
        "env": instance,
        "url": url,
        **({"description": record.description} if config.agent_description is not None else {}),
        "hosted": hosted,
        "mcp_url": mcp_url,
        **({"extensions": extensions} if extensions else {}),
        **({"restored_context_id": restored} if restored else {}),
        **changelog,
        **extras,
        **({"sandbox": sandbox} if sandbox else {}),
        **({"images": {record.name: image_id}} if image_id else {}),
        **({"requested": asked} if asked else {}),
        **({"metadata": config.metadata} if config.metadata else {}),
    }


def _artifact_skills(ctx: StepContext, skill_files: dict[str, str]) -> list[InlineSkill]:
    """The record's skill artifacts as skill-config/v1 takes them: each one's SKILL.md, described by its
    `description:` line (front matter) or its first line."""
    skills = []
    for path, key in sorted(skill_files.items()):
        name, _, rest = path.removeprefix("/skills/").partition("/")
        if rest != "SKILL.md":
            continue
        text = ctx.stores.objects.get(key).decode(errors="replace")
        lines = [line.strip() for line in text.splitlines() if line.strip() and line.strip() != "---"]
        described = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("description:")), None)
        description = (described or (lines[0].lstrip("# ") if lines else name))[:300]
        skills.append(InlineSkill(name=name, description=description, skill_md=text))
    return skills


async def _configure(
    ctx: StepContext,
    gateway: GatewayClient,
    record: AgentRecord,
    url: str,
    instance: str | None,
    name: str,
    mcp_url: str | None,
    config: DeployAgentConfig,
) -> tuple[list[str], JsonObject]:
    """Configure an a2a agent through the `urn:agentenv:*` extensions its card declares (the reference
    framework's agents get their tools only this way). Done here, once: mcp-config has no update, and role
    tokens never expire (derived from the gateway's key). The token is minted in this activity and sent only
    to the agent's origin; the step's outputs (run history) name the extensions configured, never the token.
    Returns the extension URIs the agent declares that runs use (trajectory/v1: read after each prompt), and what
    the others add to the step's outputs (agent_extensions.deploy_extras: its peers, its install declaration)."""
    from agent_env.agents.client import agent_client
    from agent_env.agents.extensions import AGENT_CONFIG, CONFIGURING, SKILL_CONFIG, ExtensionRefused, McpServer

    skill_files, models = config.skill_files, config.models
    client = await agent_client(ctx.settings, url, hosted=False).extensions()
    mcp = None
    if instance is not None and mcp_url is not None:  # (the caller gives both or neither)
        token = await gateway.token(instance, name)
        mcp = McpServer(url=mcp_url, name=f"agentenv-{instance}", headers={"authorization": f"Bearer {token}"})
    typed = record.typed_config()
    artifact_skills = await in_thread(_artifact_skills, ctx, skill_files)
    bundled = await _bundled_skills(ctx, client, artifact_skills, skill_files)
    given = inline_skills(config.skills)
    skills = getattr(typed, "skills", []) + [s for s in artifact_skills if s.name not in bundled] + given
    agent_config = typed.agent_config if record.type == "a2a" else await in_thread(_cli_settings, ctx, typed, models)
    if skill_files and not client.has(SKILL_CONFIG) and typed.sandbox is None:
        raise StepFailed(
            f"agent {record.name!r} has skills ({', '.join(record.skills)}), but its card declares no "
            f"{SKILL_CONFIG} and it runs in no sandbox to put them in: give it a `sandbox`, or serve the extension"
        )
    if given and not client.has(SKILL_CONFIG):
        raise StepFailed(
            f"agent {record.name!r} is given inline skills ({', '.join(s.name for s in given)}), but its card "
            f"declares no {SKILL_CONFIG}: serve the extension, or give the skills as artifacts to a sandboxed agent"
        )
    identity = {
        k: v for k, v in (("description", config.agent_description), ("system_prompt", config.system_prompt)) if v
    }
    if identity and record.type == "a2a":  # (a cli agent's bridge takes its settings only: the plan refused those)
        if not client.has(AGENT_CONFIG):
            raise StepFailed(
                f"agent {record.name!r} is given `{'` and `'.join(identity)}`, but its card declares no "
                f"{AGENT_CONFIG} to set them through: serve the extension, or leave them out"
            )
        agent_config = {**agent_config, **identity}
    try:
        await client.configure(mcp=mcp, config=agent_config, skills=skills)
    except ExtensionRefused as e:
        raise StepFailed(f"agent {record.name!r}: {e}") from None
    except Exception as e:  # noqa: BLE001 - the agent may be restarting: retried
        raise StepFailed(f"agent {record.name!r} could not be configured ({e})", retryable=True) from None
    extras = await deploy_extras(
        client, record.name, config.peers_deployed, lambda peer: agent_client(ctx.settings, peer, hosted=False).card()
    )
    return [uri for uri in CONFIGURING + RUN_USES if client.has(uri)], extras


async def _bundled_skills(
    ctx: StepContext, client: ExtensionClient, skills: list[InlineSkill], skill_files: dict[str, str]
) -> list[str]:
    """The skill artifacts given as bundles of objects (every file of their folders, through read grants) when
    the agent's card takes skill-config/v1's bundle variant; none if it does not, or the transfer fails (they go
    inline: their SKILL.md)."""
    if not skills:
        return []
    try:
        grants = object_grants(ctx.stores.objects, ctx.settings)
        described = {s.name: s.description for s in skills}
        return await add_skill_bundles(client, grants, ctx.stores, described, skill_files)
    except (TransferFailed, BadInput) as e:
        ctx.logger.info("skills go inline: their bundles could not be given (%s)", e)
        return []


def _cli_settings(ctx: StepContext, typed: CliConfig, models: dict[str, Any]) -> dict[str, Any]:
    """What a cli agent's bridge needs, sent through agent-config/v1: the CLI and its model endpoint with the key
    resolved here, in the activity (it goes to the agent's sandbox only, never into the run's history)."""
    from agent_env.agents.cli_agent import CliModel, CliSettings

    endpoint = models["agent"]
    settings = CliSettings(
        preset=typed.preset,
        command=typed.command,
        executable=typed.executable,
        turn_timeout_s=typed.turn_timeout.total_seconds(),
        model=CliModel(
            base_url=endpoint.base_url,
            model=endpoint.model,
            provider=endpoint.provider,
            api=endpoint.api,
            api_key=resolve_key(endpoint, open_secrets(ctx.settings)),
        ),
    )
    return settings.model_dump(mode="json")
