"""The framework's bare sandboxes: `deploy_sandbox` starts a sandbox that runs no app, known in the task by its
`sandbox_name`; `load_artifact` puts an artifact's files into it. `verify_sandbox` (`sandbox_verifier`) checks it.

The fields are the framework's. Steps that work in a sandbox name it by `sandbox_name`, not by the deploying
step's id: when the run is planned, the name becomes a reference to the outputs of the `deploy_sandbox` step
that gives it (which must come before them), so a step finds the provider and sandbox id on any worker.

What a sandbox is made of is our providers' (`agent_env.providers`): `sandbox_type` names one, or a fallback
chain (`"docker,local"`); without it, the configured provider for environments. A `vm` sandbox runs no program
of its own (on `local`, a work folder and an idle process; on `docker`, the image idling), a `container` one runs
its image's own program on `port`. The sandbox is the run's: its end, or the reaper, removes it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from agent_env.errors import AgentEnvError, BadInput
from agent_env.gateway_client.wire import JsonObject
from agent_env.providers import by_name
from agent_env.providers.apps import sandbox_name as unique_name
from agent_env.providers.base import Sandbox, SandboxSpec
from agent_env.registry.resolve import split_ref
from agent_env.spec.run import PlannedConfig
from agent_env.spec.task import upstream
from agent_env.step_types import PrepareFunction
from agent_env.steps import PlanContext, StepConfig, StepContext, StepFailed, step_type
from agent_env.steps.builtin.env_artifacts import into_env_check, load_into_env, prepare_into_env
from agent_env.steps.builtin.sandbox_steps import (
    MAX_PUT_FILES,
    SandboxStep,
    _artifact_files,
    _pin,
    attach,
    put_pinned,
    sandbox_path,
)

DEFAULT_TTL_SECONDS = 7200  # the framework's
DEFAULT_DESTINATION = "/tmp/file_artifacts"  # where load_artifact puts files when no destination_path is given


# -- naming a sandbox by its sandbox_name --


class InSandbox(StepConfig):
    """A step that works in the sandbox a `deploy_sandbox` step of the task started."""

    sandbox_name: str | None = Field(None, description="the sandbox_name of a deploy_sandbox step of this task")
    deployed: JsonObject | None = Field(
        None, description="filled in when the run is planned: a reference to that step's outputs"
    )


def deploying_step(config: PlannedConfig, plan: PlanContext, step_type: str) -> str:
    """The id of the deploy_sandbox step that gives this step's `sandbox_name` (BadInput naming the fix)."""
    name = config.get("sandbox_name")
    task = plan.task
    if task is None:
        raise BadInput(f"{step_type}: a sandbox_name is resolved within a task", "plan the step as part of a task")
    me = next((s for s in task.steps if s.id == plan.step_id), None)
    deploys = [s for s in task.steps if s.type == "deploy_sandbox" and s.config.get("sandbox_name") == name]
    where = f"step {me.id!r}" if me else step_type
    if not deploys:
        given = sorted({str(s.config.get("sandbox_name")) for s in task.steps if s.type == "deploy_sandbox"})
        raise BadInput(
            f"{where}: sandbox_name {name!r} is given by no deploy_sandbox step of task {task.id!r}",
            "add a deploy_sandbox step with that sandbox_name"
            + (f", or use one of: {', '.join(given)}" if given else ""),
        )
    if len(deploys) > 1:
        raise BadInput(
            f"task {task.id!r}: steps {', '.join(repr(s.id) for s in deploys)} all deploy sandbox {name!r}",
            "give each deploy_sandbox step its own sandbox_name",
        )
    deploy = deploys[0]
    if me is not None and deploy.id not in upstream(me.id, {s.id: s.depends_on for s in task.steps}):
        raise BadInput(
            f"{where}: it works in sandbox {name!r}, which step {deploy.id!r} deploys, but does not come after it",
            f"add {deploy.id!r} to its depends_on (in a JSON task, a step without depends_on follows every earlier one)",
        )
    return deploy.id


def prepare_in_sandbox(step_type: str) -> PrepareFunction:
    def prepare(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
        if config.get("sandbox_name") is not None:
            config["deployed"] = f"${{steps.{deploying_step(config, plan, step_type)}.outputs}}"
        return config

    return prepare


async def sandbox_of(ctx: StepContext, config: InSandbox) -> Sandbox:
    """The sandbox the deploy_sandbox step recorded, checked to be this run's."""
    return await attach(ctx, SandboxStep(sandbox=str(config.sandbox_name), deployed=config.deployed))


# -- deploy_sandbox --


class DeploySandboxConfig(StepConfig):
    sandbox_name: str = Field(min_length=1, max_length=64, description="what other steps name this sandbox by")
    sandbox_mode: Literal["vm", "container"] = Field(
        description="vm: a machine to run commands in; container: an image serving on `port`"
    )
    image: str | None = Field(None, description="the image (container mode; vm mode on providers that run images)")
    cpu: float = Field(1.0, gt=0, description="CPUs, enforced where the provider can when given")
    memory_mb: int = Field(8192, ge=16, description="memory, enforced where the provider can when given")
    disk_size_gb: float = Field(10, gt=0, description="accepted for the framework's tasks; not enforced here")
    ttl_seconds: int = Field(DEFAULT_TTL_SECONDS, gt=0, le=7 * 86400, description="after this the reaper removes it")
    exposed_ports: list[int] | None = Field(None, description="accepted; the sandbox's one port is `port`")
    boot_mode: str | None = Field(None, description="accepted; not used by these providers")
    port: int | None = Field(None, ge=1, le=65535, description="the port a container-mode image serves on")
    env_vars: dict[str, str] | None = Field(None, description="the environment of a container-mode sandbox")
    sandbox_type: str | None = Field(None, description="the provider (or a chain, e.g. 'docker,local')")
    network_policy: JsonObject | None = Field(None, description="not supported yet: leave it out")
    metadata: JsonObject = Field(default_factory=dict, description="free-form, kept with the step")

    @model_validator(mode="after")
    def _check(self) -> DeploySandboxConfig:
        if self.sandbox_mode == "container" and (self.image is None or self.port is None):
            raise ValueError("a container-mode sandbox needs `image` and `port`")
        if self.network_policy is not None:
            raise ValueError("network_policy is not supported yet: leave it out (the provider's network is open)")
        return self


def _spec(ctx: StepContext, config: DeploySandboxConfig) -> SandboxSpec:
    vm = config.sandbox_mode == "vm"
    given = config.model_fields_set
    return SandboxSpec(
        name=unique_name(f"{ctx.run_id}.{ctx.step_id}", config.sandbox_name),
        run_id=ctx.run_id,
        owner=f"{ctx.run_id}.{ctx.step_id}",
        image=config.image,
        command=["sleep", str(config.ttl_seconds)] if vm else None,  # a vm idles: commands are exec'd into it
        env=dict(config.env_vars or {}),
        port=None if vm else config.port,
        cpus=config.cpu if "cpu" in given else None,
        memory_mb=config.memory_mb if "memory_mb" in given else None,
        ttl=float(config.ttl_seconds),
    )


@step_type(
    "deploy_sandbox",
    config=DeploySandboxConfig,
    timeout="20m",
    sandboxes=lambda config: True,
)
async def deploy_sandbox(ctx: StepContext, config: DeploySandboxConfig) -> JsonObject:
    """Start a sandbox that runs no app (a vm to run commands in, or a container); other steps name it by
    sandbox_name."""
    chain = config.sandbox_type or ctx.settings.sandboxes.envs
    try:
        provider, sandbox = await by_name.create(chain, _spec(ctx, config), ctx.settings)
    except AgentEnvError as e:
        raise StepFailed(f"sandbox {config.sandbox_name!r}: {e}") from None
    return {
        "sandbox": {
            "provider": provider.name,
            "id": sandbox.info.id,
            "name": config.sandbox_name,
            "mode": config.sandbox_mode,
            "url": sandbox.url,
        }
    }


# -- load_artifact --

_NOT_YET = {
    "agent_name": "loading into an agent's sandbox",
    "container_name": "loading into a container of a vm",
    "urls": "downloading URLs",
    "collected_artifacts_step_id": "loading what a step collected",
    "snapshot_after_load": "snapshotting after a load",
}


class ArtifactRef(StepConfig):
    id: str = Field(min_length=1, description="the artifact: the bundle's artifacts/ID, or the registry's")
    version: int | str | None = Field(None, description="a registry version (default: the bundle's, else the latest)")


class LoadArtifactConfig(InSandbox):
    artifact_id: str | None = Field(None, min_length=1, description="the artifact to load (or give `artifacts`)")
    artifact_version: int | str | None = Field(None, description="its registry version")
    artifacts: list[ArtifactRef] | None = Field(None, description="several artifacts, each {id, version}")
    destination_path: str | None = Field(None, description=f"the folder they go in (default {DEFAULT_DESTINATION})")
    env_id: str | None = Field(
        None, description="load environment artifacts or universes into the env this task deploys"
    )
    env_step_id: str | None = Field(None, description="or into the env of this deploy_env step")
    agent_name: str | None = None
    container_name: str | None = None
    urls: list[Any] | None = None
    collected_artifacts_step_id: str | None = None
    artifact_from_step_id: str | None = Field(
        None, description="into an env: load the universe this snapshot_env step captured (its snapshot_id)"
    )
    snapshot_after_load: bool | None = None
    pinned: dict[str, str] = Field(
        default_factory=dict, description="filled in when the run is planned: path -> the bytes' object key"
    )
    env: str | None = Field(None, description="filled in when the run is planned: the deploy_env step loaded into")
    env_data: dict[str, str] = Field(
        default_factory=dict, description="filled in when the run is planned: NAME@VERSION -> its data's object key"
    )
    made: JsonObject | None = Field(None, description="filled in when the run is planned: that step's outputs")

    @model_validator(mode="after")
    def _check(self) -> LoadArtifactConfig:
        for field, what in _NOT_YET.items():
            if getattr(self, field) is not None:
                raise ValueError(f"`{field}`: {what} is not supported yet; load into a deploy_sandbox sandbox")
        if self.env_id is not None or self.env_step_id is not None:
            into_env_check(self)
            return self
        if self.artifact_from_step_id is not None:
            raise ValueError("`artifact_from_step_id` loads what a step captured into an env: give `env_id`")
        if self.sandbox_name is None:
            raise ValueError("give `sandbox_name`: the deploy_sandbox sandbox to load into (or `env_id`: an env)")
        if (self.artifact_id is None) == (self.artifacts is None):
            raise ValueError("give exactly one of `artifact_id` or `artifacts`")
        if self.destination_path is not None:
            sandbox_path(self.destination_path)
        return self

    def refs(self) -> list[str]:
        """Each artifact as NAME[@VERSION]."""
        if self.artifact_id is None and self.artifacts is None:
            return []
        listed = self.artifacts or [ArtifactRef(id=str(self.artifact_id), version=self.artifact_version)]
        return [a.id + ("" if a.version is None else f"@{a.version}") for a in listed]


def prepare_load(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    """Pin every file of the artifacts as content-addressed objects, keyed by where each goes (into an env: each
    artifact's data, see `env_artifacts`)."""
    if config.get("env_id") is not None or config.get("env_step_id") is not None:
        checked = LoadArtifactConfig.model_validate({k: v for k, v in config.items() if k != "deployed"})
        return prepare_into_env(config, plan, checked.refs())
    config = prepare_in_sandbox("load_artifact")(config, plan)
    checked = LoadArtifactConfig.model_validate({k: v for k, v in config.items() if k != "deployed"})
    destination = (checked.destination_path or DEFAULT_DESTINATION).rstrip("/")
    pinned: dict[str, str] = {}
    for ref in checked.refs():
        for relative, data in _artifact_files(plan, ref):
            name = relative or split_ref(ref)[0]  # an artifact that is one file keeps its name
            pinned[sandbox_path(f"{destination}/{name}")] = _pin(plan, data)
    if len(pinned) > MAX_PUT_FILES:
        raise BadInput(f"load_artifact would put {len(pinned)} files", f"load at most {MAX_PUT_FILES} in one step")
    config["pinned"] = pinned
    return config


@step_type(
    "load_artifact",
    config=LoadArtifactConfig,
    timeout="10m",
    prepare=prepare_load,
    step_refs=("env_step_id", "artifact_from_step_id"),
)
async def load_artifact(ctx: StepContext, config: LoadArtifactConfig) -> JsonObject:
    """Put an artifact's files (the bundle's artifacts/ID, or the registry's) into a deploy_sandbox sandbox, or
    environment artifacts and universes into a deployed environment."""
    if config.env is not None:
        return await load_into_env(ctx, config.env, config.env_data, config.made)
    sandbox = await sandbox_of(ctx, config)
    return {"files": await put_pinned(ctx, sandbox, config.pinned)}
