"""The framework's `deploy_agent` fields that shape what is deployed, beyond which agent in which env.

Checked and applied when the run is planned (`apply_to_plan`), so a field that cannot be honoured for this agent
fails before the run starts, with the fix; applied to the agent's sandbox when it starts (`sandbox_for`):

- `a2a_agent_version` (ours: `agent_version`): the agent's version in the registry, pulled like deploy_env's.
- `agent_description`, `system_prompt`: the agent's own, overridden. A hosted agent's record takes them (an llm
  agent's system prompt, a persona's brief); an a2a agent gets them through its urn:agentenv:agent-config/v1 (its
  card then shows the description), and the deploy fails if its card takes no config.
- `skills`: given at deploy time, as add_skills gives them: artifacts (NAME[@VERSION], as a record's `skills`) or
  the framework's inline skills (`name`, `description`, `skill_md` or `content`).
- `env_vars`, `litellm_base_url` ($LITELLM_BASE_URL): the sandboxed agent's process environment. Names are checked
  and sizes capped; a value `secret:NAME` stays a reference in the run's history and is read in the activity, only
  for this sandbox. `litellm_base_url` is also the model endpoint of an agent that has one here (llm, persona,
  cli): the configured key goes with it only on its own origin.
- `cpu`, `memory_mb`, `ttl_seconds`, `network_policy`: the agent's sandbox, as deploy_env sizes its apps' (limits
  where the chain's providers enforce them, recorded either way; after `ttl_seconds` the reaper removes it; a
  policy a provider cannot enforce fails the deploy). `disk_size_gb` is recorded: no provider here sets one.
- `metadata`: kept in the step's outputs.
- `sandbox_name`: serve the agent in a deploy_sandbox step's sandbox instead of one of its own (agent_in_sandbox).
- `agent_snapshot_files_artifact_id` (`_version`): restore the agent from a registry artifact of type
  agent_state (snapshot_agent_state's `artifact_id` makes them), as `agent_snapshot` restores a run's snapshot.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent_env.bundles import find_agent
from agent_env.errors import AgentEnvError, BadInput
from agent_env.gateway_client.wire import JsonObject
from agent_env.registry.resolve import pull_atomically
from agent_env.registry.store import Registry
from agent_env.registry.universes import _verified
from agent_env.spec.agent import AgentRecord, InlineSkill
from agent_env.spec.artifacts import AGENT_STATE
from agent_env.spec.env import ENV_NAME, AgentSandbox
from agent_env.spec.secret_refs import NAME as SECRET_NAME
from agent_env.spec.secret_refs import PREFIX, is_reference
from agent_env.spec.templates import ref
from agent_env.steps import PlanContext, StepConfig
from agent_env.steps.builtin.bare_sandboxes import deploying_step
from agent_env.steps.builtin.deploy_env import _limits_apply

if TYPE_CHECKING:
    from agent_env.config import Settings

MAX_ENV_VARS = 64
MAX_ENV_VALUE = 8192  # characters of one value
MAX_ENV_TOTAL = 65_536  # characters of all names and values
RESERVED_ENV = ("HOST", "PORT")  # where the provider says the sandbox serves
RESERVED_PREFIX = "AGENT_ENV_"  # ours to set (a server's token, the public URL): never a task's
LITELLM_ENV = "LITELLM_BASE_URL"
PASS_ENV = "AGENT_ENV_PASS_ENV"  # the names of the step's env_vars (see agent_env.agents.cli_agent)
PINNED_SNAPSHOTS = "agent_snapshots/registry/"  # where a snapshot artifact's objects are put for a load
MODEL_AGENTS = {"llm": "agent", "persona": "persona", "cli": "agent"}  # agents with a model endpoint here


class FrameworkSkill(BaseModel):
    """A skill given inline at deploy time, as the framework writes it (`content` is its older name for
    `skill_md`); skills held in the object store are refused by name."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    description: str = Field("", max_length=1024)
    skill_md: str = Field(max_length=100_000)

    @model_validator(mode="before")
    @classmethod
    def _older_name(cls, data: object) -> object:
        if isinstance(data, dict) and "content" in data and "skill_md" not in data:
            data = {("skill_md" if k == "content" else k): v for k, v in data.items()}
        return data

    def inline(self) -> InlineSkill:
        return InlineSkill(name=self.name, description=self.description or self.name, skill_md=self.skill_md)


class NetworkPolicy(BaseModel):
    """The framework's egress intent: `allow_all`, or an `allowlist` (none listed: no egress at all)."""

    model_config = ConfigDict(extra="forbid")
    mode: Literal["allow_all", "allowlist"] = "allow_all"
    allow_hosts: list[str] = Field(default_factory=list, max_length=64)
    allow_cidrs: list[str] = Field(default_factory=list, max_length=64)

    def network(self) -> str | list[str]:
        """As our sandboxes' `network` takes it."""
        if self.mode == "allow_all":
            if self.allow_hosts or self.allow_cidrs:
                raise ValueError("network_policy allow_all permits everything: drop allow_hosts and allow_cidrs")
            return "open"
        if self.allow_hosts:
            raise ValueError(
                "network_policy allow_hosts: egress is enforced by address here, not by host name — give the "
                "hosts' addresses in allow_cidrs"
            )
        for cidr in self.allow_cidrs:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ValueError(f"network_policy allow_cidrs entry {cidr!r} is not an IP address or CIDR") from None
        return list(self.allow_cidrs) or "none"


def check_env_vars(env: dict[str, str]) -> dict[str, str]:
    """Names a process can receive, not ones the provider or agent-env sets; bounded sizes; `secret:` references
    that name a secret."""
    if len(env) > MAX_ENV_VARS:
        raise ValueError(f"env_vars has {len(env)} variables; at most {MAX_ENV_VARS}")
    if sum(len(k) + len(v) for k, v in env.items()) > MAX_ENV_TOTAL:
        raise ValueError(f"env_vars hold over {MAX_ENV_TOTAL} characters: put large inputs in an artifact")
    for name, value in env.items():
        if not ENV_NAME.match(name):
            raise ValueError(f"env_vars name {name!r} is not a variable name (letters, digits, '_', not first a digit)")
        if name in RESERVED_ENV or name.startswith(RESERVED_PREFIX):
            raise ValueError(f"env_vars {name}: set by agent-env or the sandbox's provider — use another name")
        if len(value) > MAX_ENV_VALUE:
            raise ValueError(f"env_vars {name}: {len(value)} characters; a value holds at most {MAX_ENV_VALUE}")
        if is_reference(value) and not SECRET_NAME.match(value[len(PREFIX) :]):
            raise ValueError(f"env_vars {name}: {value!r} is no secret reference (secret:NAME)")
    return env


def check_base_url(url: str | None) -> str | None:
    """An http(s) URL with a host and no credentials of its own (a key goes only by its endpoint's settings)."""
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"litellm_base_url {url!r} is not an http(s) URL")
    if parts.username or parts.password:
        raise ValueError("litellm_base_url carries credentials: give the URL alone (keys are secret:NAME settings)")
    return url


def apply_to_plan(config: JsonObject, record: AgentRecord, plan: PlanContext) -> AgentRecord:
    """The record as this step deploys it, checking each given field fits the agent (BadInput naming the fix);
    pins a registry snapshot artifact as `agent_snapshot`."""
    given = {k for k, v in config.items() if v not in (None, {}, [])}
    label = f"deploy_agent of agent {record.name!r} ({record.type})"
    sandboxed = record.sandbox() is not None
    for field in ("env_vars", "network_policy"):
        if field in given and not sandboxed:
            raise BadInput(
                f"{label}: `{field}` shapes the agent's sandbox, and this agent runs in none",
                f"remove `{field}`, or deploy an agent that runs in a sandbox (an a2a agent's `sandbox`, a cli agent)",
            )
    if "litellm_base_url" in given and not sandboxed and record.type not in MODEL_AGENTS:
        raise BadInput(
            f"{label}: `litellm_base_url` is a model endpoint, and this agent has none here",
            "remove it (an a2a agent at a URL of its own takes its endpoint from its own settings)",
        )
    if config.get("sandbox_name") is not None:
        _place_in_sandbox(config, record, plan, label)
    update: JsonObject = {}
    if config.get("agent_description") is not None:
        update["description"] = config["agent_description"]
    if config.get("system_prompt") is not None:
        prompted = {"llm": "system_prompt", "persona": "brief", "a2a": None}
        if record.type not in prompted:
            raise BadInput(
                f"{label}: `system_prompt` goes to an agent's model, and a {record.type} agent takes none here",
                "remove it"
                + (" (give the CLI its instructions in prompt_agent's prompt)" if record.type == "cli" else ""),
            )
        if (key := prompted[record.type]) is not None:
            update["config"] = {**record.config, key: config["system_prompt"]}
    refs = [s for s in config.get("skills") or [] if isinstance(s, str)]
    if refs:
        update["skills"] = record.skills + [s for s in refs if s not in record.skills]
    if update:
        record = AgentRecord.model_validate({**record.model_dump(mode="json"), **update})
    if config.get("agent_snapshot_files_artifact_id"):
        if config.get("agent_snapshot") and not str(config["agent_snapshot"]).startswith(PINNED_SNAPSHOTS):
            raise BadInput(
                f"{label}: give `agent_snapshot` or `agent_snapshot_files_artifact_id`, not both",
                "restore the agent from one snapshot",
            )
        version = config.get("agent_snapshot_files_artifact_version")
        config["agent_snapshot"] = pin_snapshot_artifact(plan, config["agent_snapshot_files_artifact_id"], version)
    return record


def _place_in_sandbox(config: JsonObject, record: AgentRecord, plan: PlanContext, label: str) -> None:
    """`sandbox_name`: the agent's command runs in that deploy_sandbox step's sandbox (agent_in_sandbox)."""
    box = record.sandbox()
    if box is None or not box.command:
        raise BadInput(
            f"{label}: `sandbox_name` places the agent's program in a deployed sandbox, and this agent has "
            + ("none" if box is None else "no `command` in its sandbox"),
            "give the agent a `sandbox` with a `command` (and a `build` folder for its files), or leave sandbox_name out",
        )
    for field, why in (("provider", "its provider"), ("network_policy", "its network")):
        if config.get(field) is not None:
            raise BadInput(
                f"{label}: `{field}` with `sandbox_name`: the sandbox is the deploy_sandbox step's, and so is {why}",
                f"remove `{field}`, or set it on the deploy_sandbox step",
            )
    config["sandbox_deployed"] = ref(f"steps.{deploying_step(config, plan, 'deploy_agent')}.outputs")


def registry_agent(plan: PlanContext, name: str, version: int) -> tuple[AgentRecord, Path]:
    """Version `version` of agent `name` in the registry, pulled once into the state dir as a bundle folder."""
    registry = Registry(plan.stores.documents, plan.stores.objects)
    try:
        found = registry.version("agents", name, str(version))
    except AgentEnvError as e:
        raise BadInput(f"deploy_agent a2a_agent_version {version} of agent {name!r}: {e.problem}", e.fix) from None
    folder = Path(plan.settings.state_dir) / "registry" / found.digest.removeprefix("sha256:")
    if not (folder / "agents" / name).is_dir():
        pull_atomically(registry, found, folder)
    found_record, found_folder = find_agent(folder, name, with_folder=True, aliases=False)
    return found_record, found_folder


def pin_snapshot_artifact(plan: PlanContext, artifact: str, version: int | None) -> str:
    """The objects of an agent_state artifact version, put under a prefix of their own (named by the version's
    digest: the same version, the same prefix) for snapshot/v1's load; returns the prefix."""
    registry = Registry(plan.stores.documents, plan.stores.objects)
    ref = artifact + ("" if version is None else f"@{version}")
    try:
        found = registry.version("artifacts", artifact, None if version is None else str(version))
        files = _verified(registry, found)
    except AgentEnvError as e:
        raise BadInput(f"deploy_agent agent_snapshot_files_artifact_id {ref!r}: {e.problem}", e.fix) from None
    if found.record.get("type") != AGENT_STATE or "trajectory" not in files:
        raise BadInput(
            f"deploy_agent agent_snapshot_files_artifact_id {ref!r} is no agent's saved state "
            f"(type {found.record.get('type')!r}, files: {', '.join(sorted(files)) or 'none'})",
            "name an artifact snapshot_agent_state made with `artifact_id`",
        )
    prefix = f"{PINNED_SNAPSHOTS}{found.digest.removeprefix('sha256:')[:32]}/"
    for name, data in files.items():
        if not plan.stores.objects.exists(prefix + name):
            plan.stores.objects.put(prefix + name, data)
    return prefix


def inline_skills(skills: list[str | FrameworkSkill]) -> list[InlineSkill]:
    return [s.inline() for s in skills if isinstance(s, FrameworkSkill)]


def model_override(record: AgentRecord, base_url: str | None) -> JsonObject | None:
    """The agent's model override, with the step's endpoint base URL over its own."""
    override = record.model_override()
    fields = override.model_dump(exclude_none=True) if override else {}
    return {**fields, "base_url": base_url} if base_url else (fields or None)


def sandbox_for(
    box: AgentSandbox, fields: FrameworkDeployFields, chain: str, settings: Settings
) -> tuple[AgentSandbox, JsonObject]:
    """The agent's sandbox as this step sizes it; and what the step asked beyond the agent, for the run's record."""
    changes: JsonObject = {}
    env = {**box.env, **fields.env_vars}
    if fields.env_vars:  # a cli agent's bridge hands these, and only these, on to its CLI (agents.cli_agent)
        env[PASS_ENV] = ",".join(sorted(fields.env_vars))
    if fields.litellm_base_url:
        env[LITELLM_ENV] = fields.litellm_base_url
    if env != box.env:
        changes["env"] = env
    limited = (fields.cpu is not None or fields.memory_mb is not None) and _limits_apply(chain, settings)
    if limited:
        changes.update(cpus=fields.cpu or box.cpus, memory_mb=fields.memory_mb or box.memory_mb)
    if fields.ttl_seconds is not None:
        changes["ttl_hours"] = fields.ttl_seconds / 3600
    if fields.network_policy is not None:
        changes["network"] = fields.network_policy.network()
    return (box.model_copy(update=changes) if changes else box), requested(fields, limited)


def requested(fields: FrameworkDeployFields, limited: bool) -> JsonObject:
    """What the step asked of the deploy beyond the agent, as given (a hosted agent's sizes are recorded only)."""
    asked = fields.model_dump(include={"ttl_seconds", "cpu", "memory_mb", "disk_size_gb"}, exclude_none=True)
    if fields.cpu is not None or fields.memory_mb is not None:
        asked["resources_applied"] = limited
    if fields.network_policy is not None:
        asked["network"] = fields.network_policy.network()
    if fields.env_vars:
        asked["env_vars"] = sorted(fields.env_vars)  # their names only
    return asked


class FrameworkDeployFields(StepConfig):
    """deploy_agent's fields of the framework's that shape the deployment (the module's docstring says how)."""

    agent_version: int | None = Field(
        None, ge=1, description="the agent's version in the registry (default: the bundle's)"
    )
    agent_description: str | None = Field(None, max_length=4096, description="the agent's description, over its own")
    system_prompt: str | None = Field(
        None, max_length=100_000, description="the agent's system prompt (a persona's brief), over its own"
    )
    skills: list[str | FrameworkSkill] = Field(
        default_factory=list,
        max_length=64,
        description="skills given at deploy: artifacts (NAME[@VERSION]) or inline ({name, description, skill_md})",
    )
    env_vars: dict[str, str] = Field(
        default_factory=dict, description="the sandboxed agent's environment (secrets as secret:NAME)"
    )
    litellm_base_url: str | None = Field(
        None, max_length=2048, description="the agent's model endpoint base URL ($LITELLM_BASE_URL in its sandbox)"
    )
    cpu: float | None = Field(None, gt=0, le=64, description="CPUs of the agent's sandbox, where the provider limits")
    memory_mb: int | None = Field(None, ge=16, description="memory of the agent's sandbox, where the provider limits")
    disk_size_gb: float | None = Field(None, gt=0, description="recorded: no provider here sets a disk size")
    ttl_seconds: int | None = Field(
        None, gt=0, le=7 * 86400, description="the reaper removes the agent's sandbox this long after it starts"
    )
    metadata: JsonObject = Field(default_factory=dict, description="kept in the step's outputs")
    network_policy: NetworkPolicy | None = Field(None, description="the agent's sandbox's egress")
    agent_snapshot_files_artifact_id: str | None = Field(
        None, min_length=1, description="restore the agent from this registry artifact (type agent_state)"
    )
    agent_snapshot_files_artifact_version: int | None = Field(None, ge=1, description="its version (default: latest)")

    @field_validator("env_vars")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        return check_env_vars(value)

    @field_validator("litellm_base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        return check_base_url(value)

    @field_validator("network_policy")
    @classmethod
    def _policy(cls, value: NetworkPolicy | None) -> NetworkPolicy | None:
        if value is not None:
            value.network()  # (raises on what cannot be enforced)
        return value

    @model_validator(mode="after")
    def _paired(self) -> FrameworkDeployFields:
        if self.agent_snapshot_files_artifact_version is not None and not self.agent_snapshot_files_artifact_id:
            raise ValueError("agent_snapshot_files_artifact_version without agent_snapshot_files_artifact_id")
        return self
