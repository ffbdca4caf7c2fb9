"""What a run reads from and writes to an a2a agent through protocol v1's extensions, objects included: its state,
saved and restored through `urn:agentenv:snapshot/v1` (the `snapshot_agent_state` step, and the restore
`deploy_agent` does when given `agent_snapshot`, where the framework does it), and its trajectory of a turn
through `urn:agentenv:trajectory/v1` (`prompt_agent`, after each turn).

The agent moves its objects itself, through short-lived grants on the run's object store (`stores.grants`): the
snapshot lands under `runs/RUN/agent_snapshots/NAME/` (`trajectory`, and `workspace` if the agent keeps one), and
the step's outputs name those keys, never a grant. With the framework's `artifact_id`, snapshot_agent_state also keeps
those objects as a new version of that registry artifact (type `agent_state`, with its lineage: the run, the step,
the prefix), for a judge (`load_artifact` into its sandbox) or a later run. With the framework's `env_id` it also keeps
each app's data of that env (data/get) beside the snapshot (`services/APP.json`, in the artifact too), for a judge
to grade the agent's work in the env by; `universe_artifact_id` keeps only the apps of that universe.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import Field, model_validator

from agent_env.agents.client import agent_client
from agent_env.agents.extensions import ExtensionClient, ExtensionRefused
from agent_env.agents.transfers import (
    SNAPSHOT,
    TransferFailed,
    load_snapshot,
    save_snapshot,
    snapshot_prefix,
    takes_inline_trajectory,
    takes_task_objects,
    trajectory_object,
)
from agent_env.errors import AgentEnvError, BadInput, NotFound
from agent_env.gateway_client.wire import JsonObject
from agent_env.registry.store import Registry
from agent_env.registry.universes import environment_data, push_new_version
from agent_env.spec.artifacts import AGENT_STATE, Lineage
from agent_env.spec.run import PlannedConfig
from agent_env.spec.templates import ref
from agent_env.steps import PlanContext, StepConfig, StepContext, StepFailed, step_type
from agent_env.steps.builtin.agent_extensions import deployed_extension
from agent_env.steps.builtin.envs import instance_id
from agent_env.stores import in_thread, open_stores
from agent_env.stores.grant_issuers import object_grants
from agent_env.validators.universe import exported_by_app

if TYPE_CHECKING:
    from agent_env.config import Settings

log = logging.getLogger(__name__)
_INLINE_ONLY: OrderedDict[str, None] = OrderedDict()  # agents whose task_objects failed here (the latest 256)


class SnapshotAgentStateConfig(StepConfig):
    framework_names = {
        "agent_name": ("agent", "agent_step"),
        "prompt_id": ("prompt", "prompt_step"),
        "env_id": ("env", "env_step"),
    }

    agent: str = Field(description="the deploy_agent step of the agent to snapshot")
    prompt: str = Field(description="the prompt_agent step whose conversation with it to save")
    name: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="the snapshot's name in the run (default: the step's id)"
    )
    timeout_seconds: float = Field(600, gt=0, le=3600, description="how long the agent may take to save")
    artifact_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
        description="also keep the state as a new version of this registry artifact (for a judge or a later run)",
    )
    env: str | None = Field(
        None, description="also keep each app's data of this deploy_env step's env beside the snapshot (services/)"
    )
    universe_artifact_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9._-]+)?$",
        description="with `env`: keep only the apps of this universe (NAME or NAME@VERSION, pinned when planned)",
    )
    universe_apps: list[str] | None = Field(None, description="filled in when the run is planned")
    deployed: JsonObject = Field(default_factory=dict, description="filled in when the step starts")

    @model_validator(mode="after")
    def _universe_of_env(self) -> SnapshotAgentStateConfig:
        if self.universe_artifact_id is not None and self.env is None:
            raise ValueError("`universe_artifact_id` names the apps of an env: give the env too (`env_id` or `env`)")
        return self


def prepare_snapshot(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    config["deployed"] = ref(f"steps.{config['agent']}.outputs")
    if universe := config.get("universe_artifact_id"):
        name, _, label = str(universe).partition("@")
        try:
            found = environment_data(Registry(plan.stores.documents, plan.stores.objects), name, label or None)
        except (BadInput, NotFound) as e:
            raise BadInput(f"universe_artifact_id: {e.problem}", e.fix) from None
        config["universe_artifact_id"], config["universe_apps"] = str(found.pin), sorted(found.data)
    return config


@step_type(
    "snapshot_agent_state",
    config=SnapshotAgentStateConfig,
    timeout="65m",
    prepare=prepare_snapshot,
    step_refs=("agent", "prompt", "env"),
)
async def snapshot_agent_state(ctx: StepContext, config: SnapshotAgentStateConfig) -> JsonObject:
    """Save a deployed agent's state of a conversation into the object store, through snapshot/v1."""
    client = await _snapshotting(ctx, config.deployed, config.agent)
    context_id = f"{ctx.run_id}/{config.prompt}/agent"  # the conversation prompt_agent held with it
    prefix = snapshot_prefix(ctx.run_id, config.name or ctx.step_id)
    try:
        grants = object_grants(ctx.stores.objects, ctx.settings)
        saved = await save_snapshot(client, grants, ctx.stores, prefix, context_id, timeout=config.timeout_seconds)
    except (TransferFailed, ExtensionRefused, BadInput) as e:
        raise StepFailed(f"agent {config.deployed.get('name')!r} could not save its state: {e}") from None
    if config.env is not None:
        saved |= await _env_state(ctx, config.env, config.universe_apps, prefix)
    if config.artifact_id is not None:
        record = {
            "type": AGENT_STATE,
            "agent": config.deployed.get("name"),
            "context_id": saved.get("context_id") or context_id,
            "lineage": Lineage(run_id=ctx.run_id, step=ctx.step_id, source=prefix).model_dump(exclude_none=True),
        }
        objects = {
            **(saved.get("objects") or {}),
            **{f"services/{a}.json": k for a, k in saved.get("services", {}).items()},
        }
        files = {name: await ctx.stores.aio.objects.get(key) for name, key in sorted(objects.items())}
        registry = Registry(ctx.stores.documents, ctx.stores.objects)
        pushed = await in_thread(push_new_version, registry, config.artifact_id, record, files)
        saved["artifact"] = {"id": pushed.name, "version": pushed.label}
    return saved


async def _env_state(ctx: StepContext, env: str, apps: list[str] | None, prefix: str) -> JsonObject:
    """Each app's data of the env (data/get), as JSON beside the snapshot: `services` {app: key}, and the apps of
    the universe the env did not give (`services_missing`)."""
    try:
        exported = exported_by_app(await (await ctx.gateway()).data(instance_id(ctx, env), "data/get"))
    except AgentEnvError as e:
        raise StepFailed(f"the data of env {env!r} could not be read: {e}") from None
    services: dict[str, str] = {}
    for app in sorted(exported) if apps is None else apps:
        if app in exported:
            key = f"{prefix}services/{app}.json"
            await ctx.stores.aio.objects.put(key, json.dumps(exported[app]).encode())
            services[app] = key
    return {"services": services, "services_missing": sorted(set(apps or ()) - set(services))}


async def capture_state(
    ctx: StepContext, deployed: JsonObject, context_id: str, name: str, timeout: float
) -> JsonObject:
    """Save a deployed agent's state of a conversation as the run's snapshot `name` (a prompt's snapshot_config);
    StepFailed when it cannot."""
    client = await _snapshotting(ctx, deployed, deployed.get("name") or "")
    try:
        grants = object_grants(ctx.stores.objects, ctx.settings)
        return await save_snapshot(
            client, grants, ctx.stores, snapshot_prefix(ctx.run_id, name), context_id, timeout=timeout
        )
    except (TransferFailed, ExtensionRefused, BadInput) as e:
        raise StepFailed(f"agent {deployed.get('name')!r} could not save its state: {e}") from None


async def restore_agent_state(
    ctx: StepContext, deployed: JsonObject, snapshot: str, target_context_id: str | None
) -> str:
    """Load a snapshot (a snapshot_agent_state's name in this run, or its key prefix) into a deployed agent;
    the context id the agent restored it as."""
    client = await _snapshotting(ctx, deployed, deployed.get("agent") or "")
    prefix = snapshot if "/" in snapshot else snapshot_prefix(ctx.run_id, snapshot)
    try:
        grants = object_grants(ctx.stores.objects, ctx.settings)
        return await load_snapshot(
            client, grants, ctx.stores, prefix.rstrip("/") + "/", target_context_id, timeout=600.0
        )
    except (TransferFailed, ExtensionRefused, BadInput) as e:
        raise StepFailed(f"agent {deployed.get('name')!r} could not load the snapshot {snapshot!r}: {e}") from None


async def _snapshotting(ctx: StepContext, deployed: JsonObject, step: str) -> ExtensionClient:
    """The extension client of a deployed agent whose card declares snapshot/v1."""
    return await deployed_extension(
        ctx,
        deployed,
        SNAPSHOT,
        step=step,
        fix="its state cannot be saved or restored: serve the extension (our SDK: give the agent save_state and "
        "load_state)",
        hosted_refusal=f"its conversation is in the run's transcripts, and it serves no {SNAPSHOT}",
    )


async def agent_trajectory(settings: Settings, who: JsonObject, task_id: str, key: str) -> Any:
    """The agent's own account of one ended task (None if it kept none). Through a grant (`task_objects`: the
    agent writes it into our store at `key`) when its card lists that variant, else (or if that fails: an agent
    that cannot reach or trust our grants' server) inline. An unreadable one is noted, never fatal to the prompt."""
    try:
        client = await agent_client(settings, who["url"], hosted=False).extensions()
        if takes_task_objects(client) and who["url"] not in _INLINE_ONLY:
            stores = await in_thread(open_stores, settings)
            try:
                grants = object_grants(stores.objects, settings)
                return await trajectory_object(client, grants, stores, key, task_id)
            except (TransferFailed, BadInput) as e:
                if not takes_inline_trajectory(client):
                    raise
                _INLINE_ONLY[who["url"]] = None  # (its next turns go inline at once: a failed transfer costs retries)
                while len(_INLINE_ONLY) > 256:
                    _INLINE_ONLY.popitem(last=False)
                log.info("the trajectory of %s came inline: its task_objects failed (%s)", who.get("name"), e)
            finally:
                stores.close()
        return await client.trajectory(task_id)
    except (ExtensionRefused, TransferFailed, BadInput, httpx.HTTPError) as e:
        return {"unreadable": str(e)[:500]}
