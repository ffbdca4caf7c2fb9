"""`deploy_env`: start an instance of an environment on the gateway, with the framework's fields.

`env_id` names the environment (the bundle's `envs/NAME`, a built-in app, or an alias), `env_version` a version
of it in the registry. `sandbox_type` is the provider (or chain) its sandboxed apps run on, over the env's own;
`gateway_mode` `consistent` makes the gateway serve the instance's tool calls one at a time, in arrival order.
`ttl_seconds` ends the instance (and its apps' sandboxes) that long after it starts, even while the run goes on;
`cpu` and `memory_mb` limit its sandboxed apps where the provider can, and like `disk_size_gb` (which no provider
here sets) are recorded in the outputs either way. `artifact_id` (`artifact_version`) loads an artifact's JSON
files as the environment's data, in place of its own. `env_state_type`/`env_state_instance_id` (an external state
backend) are refused by name. Our own fields stay: `agents`, `load_data`, `now`, `fork_from`.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from agent_env import packing
from agent_env.bundles import find_env
from agent_env.envs.records import check_composition, env_for_app
from agent_env.errors import AgentEnvError, BadInput
from agent_env.gateway_client import GatewayClient, GatewayRefused, wire
from agent_env.gateway_client.env_servers import unrouted
from agent_env.gateway_client.placement import Placement
from agent_env.gateway_client.pool import GatewayPool
from agent_env.gateway_client.wire import JsonObject
from agent_env.providers import apps, by_name, topologies
from agent_env.registry.store import Registry
from agent_env.registry.universes import registry_environment_data
from agent_env.spec.env import AppRef, EnvRecord
from agent_env.spec.run import PlannedConfig, apps_in_sandboxes
from agent_env.steps import PlanContext, StepConfig, StepContext, step_type
from agent_env.steps.builtin.envs import instance_id, store_artifact
from agent_env.steps.builtin.sandbox_steps import _artifact_files
from agent_env.stores import keys

if TYPE_CHECKING:
    from agent_env.config import Settings


class DeployConfig(StepConfig):
    env_id: str = Field(
        min_length=1, description="an environment of the bundle (envs/NAME), a built-in app, or an alias"
    )
    env_version: int | None = Field(None, ge=1, description="its version in the registry (default: the bundle's)")
    agents: dict[str, str] = Field(default_factory=dict, description="agent -> role; default: one agent per role")
    load_data: bool = Field(True, description="load the environment's default data")
    now: datetime | None = Field(None, description="a fixed time for this world (RFC 3339)")
    sandbox_type: str | None = Field(
        None,
        description='sandbox provider (or chain, "docker,local") for its sandboxed apps, over the env\'s own; '
        "default: the app's, then [sandboxes] envs",
    )
    gateway_mode: Literal["performance", "consistent"] = Field(
        "performance",
        description="consistent: the gateway serves this instance's tool calls one at a time, in arrival order",
    )
    ttl_seconds: int | None = Field(
        None, gt=0, description="end the instance and its sandboxes this long after it starts (default: at run end)"
    )
    cpu: float | None = Field(None, gt=0, le=64, description="CPUs of each sandboxed app, where the provider limits")
    memory_mb: int | None = Field(None, ge=16, description="memory of each sandboxed app, where the provider limits")
    disk_size_gb: float | None = Field(None, gt=0, description="recorded: no provider here sets a disk size")
    artifact_id: str | None = Field(None, min_length=1, description="an artifact whose JSON files are the data")
    artifact_version: int | None = Field(None, ge=1, description="its registry version (default: the bundle's)")
    metadata: JsonObject = Field(default_factory=dict, description="kept in the step's outputs")
    env_state_type: str | None = Field(None, description="not supported: leave it out")
    env_state_instance_id: str | None = Field(None, description="not supported: leave it out")
    record: EnvRecord | None = Field(None, description="filled in when the run is planned")
    artifacts: list[str] = Field(default_factory=list, description="filled in when the run is planned")
    builds: dict[str, str] = Field(
        default_factory=dict, description="filled in when the run is planned: app -> its build context's object key"
    )
    fork_from: str | None = Field(
        None,
        description="an instance of the same environment to copy instead of loading the data: the new instance "
        "starts from its current state (a group of rollouts forks one prototype); gone, the data is loaded",
    )

    @field_validator("record")
    @classmethod
    def _record_composes(cls, record: EnvRecord | None) -> EnvRecord | None:
        if record is not None:
            check_composition(record.apps, record.roles)
        return record

    @field_validator("sandbox_type")
    @classmethod
    def _known_providers(cls, value: str | None) -> str | None:
        if value is not None:
            known = by_name.names()
            for name in by_name.parse_chain(value):
                if name not in known:
                    raise ValueError(f"sandbox_type {name!r} is no sandbox provider: use one of {', '.join(known)}")
        return value

    @model_validator(mode="after")
    def _supported(self, info: ValidationInfo) -> DeployConfig:
        for field in ("env_state_type", "env_state_instance_id"):
            if getattr(self, field) is not None:
                raise ValueError(
                    f"`{field}`: an external env state backend is not supported (an instance keeps its state in "
                    "the gateway) — leave it out; fork_from copies another instance's state"
                )
        if self.artifact_version is not None and self.artifact_id is None:
            raise ValueError("`artifact_version` without `artifact_id`: name the artifact too")
        if self.artifact_id is not None and not self.load_data:
            raise ValueError("`artifact_id` is the data to load, and `load_data` is false: give one of them")
        if self.record is None and self.env_version is None:  # (a registry version is found when planned)
            try:
                record, _ = find_env((info.context or {}).get("bundle"), self.env_id)
            except AgentEnvError as e:
                raise ValueError(str(e).replace("\n  fix:", " —")) from None
        else:
            record = self.record
        for agent, role in self.agents.items():
            if record is not None and role not in record.roles:
                raise ValueError(
                    f"agent {agent!r} has role {role!r}; the environment's roles are: {', '.join(record.roles)}"
                )
        return self


def _registry_env(plan: PlanContext, name: str, version: int) -> tuple[EnvRecord, Path | None]:
    """Version `version` of env `name` in the registry, pulled once into the state dir as a bundle folder."""
    try:
        found = Registry(plan.stores.documents, plan.stores.objects).version("envs", name, str(version))
    except AgentEnvError as e:
        raise BadInput(f"deploy_env env_version {version} of env {name!r}: {e.problem}", e.fix) from None
    folder = Path(plan.settings.state_dir) / "registry" / found.digest.removeprefix("sha256:")
    if not (folder / "envs" / name).is_dir():
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".pull-"))
        try:
            Registry(plan.stores.documents, plan.stores.objects).pull(found, staging)
            with contextlib.suppress(OSError):  # another planner put the same version in place first
                staging.rename(folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    record, where = find_env(folder, name, aliases=False)
    return record, where


def _artifact_data(plan: PlanContext, artifact: str, version: int | None) -> list[str]:
    """The artifact's JSON files ({app: {table: [rows]}}), each pinned as a data artifact; a registry environment
    artifact or universe: its apps' data."""
    if (key := registry_environment_data(plan.stores.documents, plan.stores.objects, artifact, version)) is not None:
        return [key]
    ref = artifact + ("" if version is None else f"@{version}")
    pinned = []
    for name, data in sorted(_artifact_files(plan, ref)):
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = None
        if not name.endswith(".json") or not isinstance(parsed, dict):
            raise BadInput(
                f"deploy_env artifact_id {ref!r}: {name!r} is no JSON data ({{app: {{table: [rows]}}}})",
                "make the artifact the env's data files only, or put other files in a sandbox with load_artifact",
            )
        pinned.append(store_artifact(plan, data))
    if not pinned:
        raise BadInput(f"deploy_env artifact_id {ref!r} holds no files", "put the env's JSON data files in it")
    return pinned


def prepare_deploy(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    """Pin the environment record in the run, and its data files (or `artifact_id`'s) as artifacts in the store."""

    if config.get("env_version") is not None:
        record, folder = _registry_env(plan, config["env_id"], int(config["env_version"]))
    else:
        record, folder = find_env(plan.bundle, config["env_id"])
    topologies.load(record.env_provider_type)  # a topology this install lacks fails here, before the run starts
    for app in record.apps:  # a missing secret fails here, before the run starts
        if app.sandbox:
            apps.check_secrets(plan.settings, app.sandbox, f"app {app.name!r} of env {record.name}")
    config["record"] = record.model_dump(mode="json")
    if config.get("artifact_id"):
        config["artifacts"] = _artifact_data(plan, config["artifact_id"], config.get("artifact_version"))
    else:
        config["artifacts"] = [store_artifact(plan, packing.read(folder, f)) for f in record.data] if folder else []
    config["builds"] = {
        app.name: apps.pin_build(plan.stores, folder, app.sandbox.build)
        for app in record.apps
        if app.sandbox and app.sandbox.build and folder
    }
    return config


def quick_deploy(config: PlannedConfig) -> bool:
    """Apps in the gateway's own process and little data: done in milliseconds, so a local activity."""
    record = config.get("record") or {}
    return (
        record.get("env_provider_type", topologies.GATEWAY) == topologies.GATEWAY
        and all((app.get("run") or "in_process") == "in_process" and app.get("app") for app in record.get("apps", []))
        and len(config.get("artifacts") or []) <= 1
    )


@step_type(
    "deploy_env",
    config=DeployConfig,
    timeout="10m",  # (a sandboxed app's first build: an image, or a local provider's virtualenv)
    prepare=prepare_deploy,
    quick=quick_deploy,
    deploys_env=True,
    sandboxes=apps_in_sandboxes,
)
async def deploy_env(ctx: StepContext, config: DeployConfig) -> JsonObject:
    """Start an instance of an environment on the gateway and load its data (or fork `fork_from`); outputs
    its URLs and agents."""
    expires_at = datetime.now(UTC) + timedelta(seconds=config.ttl_seconds) if config.ttl_seconds else None
    return await deploy(ctx, config, expires_at=expires_at)


def _requested(config: DeployConfig, limited: bool) -> JsonObject:
    """What the step asked of the deploy beyond the env, as given (for the run's record)."""
    asked = config.model_dump(include={"gateway_mode", "ttl_seconds", "cpu", "memory_mb", "disk_size_gb"})
    asked = {k: v for k, v in asked.items() if v is not None and (k != "gateway_mode" or v != "performance")}
    if config.cpu is not None or config.memory_mb is not None:
        asked["resources_applied"] = limited
    return asked


async def deploy(ctx: StepContext, config: DeployConfig, *, expires_at: datetime | None = None) -> JsonObject:
    """What `deploy_env` does, for the step and for a group's prototype (`expires_at`: the gateway deletes it
    then, even if no one released it)."""
    record = config.record or env_for_app(config.env_id)
    gateway = await ctx.gateway()
    instance = instance_id(ctx, ctx.step_id)
    server = topologies.env_server(ctx.settings, run_id=ctx.run_id, instance=instance, env_name=record.name)
    server.topology, server.sandbox_provider = record.env_provider_type, config.sandbox_type
    gateway = await topologies.serving(gateway, server, ctx.stores)
    apps_, sandboxes, images, limited = [], [], {}, True
    for ref in record.apps:
        if ref.sandbox is None:
            apps_.append(ref.model_dump(exclude_defaults=True))
            continue
        provider, sandbox, applied = await _start_sandbox(ctx, config, gateway, instance, ref, record.name, expires_at)
        limited = limited and applied
        sandboxes.append({"app": ref.name, "provider": provider, "id": sandbox.info.id, "url": sandbox.url})
        if sandbox.info.image_id:  # the exact image it ran, for the run's record
            images[ref.name] = sandbox.info.image_id
        apps_.append({"name": ref.name, "url": sandbox.url, "path": ref.sandbox.path, "prefix": ref.prefix})
    spec = {
        "id": instance,
        "run_id": ctx.run_id,
        "env": record.name,
        "apps": apps_,
        "roles": {name: role.model_dump() for name, role in record.roles.items()},
        "agents": config.agents,
        "now": config.now.isoformat() if config.now else None,
        **({"expires_at": expires_at.isoformat()} if expires_at else {}),
        **({"gateway_mode": config.gateway_mode} if config.gateway_mode != "performance" else {}),
    }
    data = config.artifacts if config.load_data else []
    described = await _fork(gateway, config.fork_from, spec) if config.fork_from else None
    if described is None:  # (what put and fork answer is what the data leaves as it is: apps, agents, paths)
        described = await gateway.put_instance(spec)
        if data:
            parts = [{"kind": "data", "data": json.loads(await ctx.stores.aio.objects.get(key))} for key in data]
            await gateway.load(instance, parts, idempotency_key=ctx.idempotency_key, reset=True)
    base = await gateway.url_for(instance)  # its gateway's (a pool places each instance on one)
    if isinstance(unrouted(gateway), GatewayPool):  # so another gateway can take the instance over if it is lost
        placement = Placement(spec=spec, gateway=base, data=data)
        await ctx.stores.aio.objects.put(keys.placement(ctx.run_id, instance), placement.model_dump_json().encode())
    requested = _requested(config, limited and bool(sandboxes))
    return {
        "instance": instance,
        "gateway": base,
        "apps": described["apps"],
        "urls": {name: base + path for name, path in described["paths"].items()},
        # Tokens are secrets and stay out of run history: these references are resolved when needed.
        "agents": {
            agent: {"role": role, "token_ref": f"gateway-token:{instance}/{agent}"}
            for agent, role in described["agents"].items()
        },
        **({"sandboxes": sandboxes} if sandboxes else {}),
        **({"images": images} if images else {}),
        **({"requested": requested} if requested else {}),
        **({"metadata": config.metadata} if config.metadata else {}),
    }


async def _fork(gateway: GatewayClient, source: str, spec: dict[str, Any]) -> wire.InstanceView | None:
    """Fork `source` into the new instance (its description); None when the source is gone (its group ended,
    or it expired): the step then deploys the environment itself, from the same record and data."""
    try:
        return await gateway.fork(source, spec)
    except GatewayRefused as e:
        if e.status != 404 or source not in str(e):
            raise
        return None


def _limits_apply(chain: str, settings: Settings) -> bool:
    """Whether every provider of the chain limits cpus and memory (else the step's `cpu`/`memory_mb` are recorded
    only: a chain falling back to a provider that cannot would otherwise fail there)."""
    try:
        return all(by_name.load(name, settings).capabilities.resources for name in by_name.parse_chain(chain))
    except AgentEnvError:
        return False


async def _start_sandbox(
    ctx: StepContext,
    config: DeployConfig,
    gateway: GatewayClient,
    instance: str,
    ref: AppRef,
    record_name: str,
    expires_at: datetime | None,
) -> tuple[str, Any, bool]:
    """Start the app's sandbox with the token its server must require: the gateway derives it from its
    key (this worker may not hold the key), hands it over the admin API, and sends it on every call; it
    lives in this activity's memory and the sandbox's environment, never in run history. Also says whether
    the step's cpu/memory limits were applied to it."""
    box, name = ref.sandbox, ref.name
    if box is None or name is None:  # (the caller passes sandboxed apps; AppRef requires their names)
        raise ValueError(f"app {ref.name!r} of env {record_name} is no named sandboxed app")
    chain = config.sandbox_type or box.provider or ctx.settings.sandboxes.envs
    limited = (config.cpu is not None or config.memory_mb is not None) and _limits_apply(chain, ctx.settings)
    changes: JsonObject = {}
    if limited:
        changes.update(cpus=config.cpu or box.cpus, memory_mb=config.memory_mb or box.memory_mb)
    if expires_at is not None:
        changes["ttl_hours"] = max((expires_at - datetime.now(UTC)).total_seconds(), 1.0) / 3600
    provider, sandbox = await apps.start(
        ctx.settings,
        ctx.stores,
        run_id=ctx.run_id,
        owner=instance,
        name=name,
        box=box.model_copy(update=changes) if changes else box,
        build_key=config.builds.get(name),
        chain=chain,
        label=f"app {name!r} of env {record_name}",
        server_token=await gateway.server_token(instance, name),
    )
    return provider.name, sandbox, limited
