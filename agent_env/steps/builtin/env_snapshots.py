"""An environment's state saved and put back: `snapshot_env` and `restore_env`.

`snapshot_env` always saves the instance's whole state in the run's object store (what `restore_env` and a
gateway taking the instance over start from). Given the framework's `snapshot_id`, it also captures the state
as a universe in the registry: each app's data (`data/get`) a new version of an environment artifact, and a
new version of universe `snapshot_id` pinning them, with its lineage (this run and step, and
`original_universe_artifact_id`, the universe it started from, pinned when the run is planned). A later run
loads it (`load_artifact` with `env_id`, or deploy_env's `artifact_id`), a judge reads it (`load_artifact`
into its sandbox). Captured into the universe it started from, each app's data is a new version of that
universe's own artifact for the app (`agent_env.registry.universes.push_universe`).
"""

from __future__ import annotations

import asyncio

from pydantic import Field

from agent_env.errors import BadInput, NotFound
from agent_env.gateway_client import GatewayClient
from agent_env.gateway_client.env_servers import unrouted
from agent_env.gateway_client.pool import GatewayPool
from agent_env.gateway_client.wire import JsonObject
from agent_env.registry.store import Registry
from agent_env.registry.universes import environment_data, push_universe
from agent_env.spec.artifacts import Lineage
from agent_env.spec.run import PlannedConfig
from agent_env.steps import PlanContext, StepContext, StepFailed, step_type
from agent_env.steps.builtin import env_changes
from agent_env.steps.builtin.env_step_configs import EnvStep, SnapshotConfig
from agent_env.steps.builtin.envs import instance_id
from agent_env.stores import in_thread, keys
from agent_env.validators.universe import exported_by_app


def prepare_snapshot(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    """The original universe, pinned to its version now."""
    if original := config.get("original_universe_artifact_id"):
        name, _, label = str(original).partition("@")
        try:
            pin = environment_data(Registry(plan.stores.documents, plan.stores.objects), name, label or None).pin
        except (BadInput, NotFound) as e:
            raise BadInput(f"original_universe_artifact_id: {e.problem}", e.fix) from None
        config["original_universe_artifact_id"] = str(pin)
    return config


@step_type("snapshot_env", config=SnapshotConfig, timeout="10m", prepare=prepare_snapshot, step_refs=("env",))
async def snapshot_env(ctx: StepContext, config: SnapshotConfig) -> JsonObject:
    """Save an environment's whole state in the object store; with `snapshot_id`, also as a registry universe."""
    gateway = await ctx.gateway()
    instance = _instance(ctx, config)
    name = config.name or ctx.step_id
    outputs: JsonObject = {}
    if config.include_env_trajectory:  # first: what was done in the env up to the snapshot
        outputs["env_trajectory"] = await env_changes.capture_trajectory(
            ctx, gateway, instance, keys.snapshot_trajectory(ctx.run_id, name)
        )
    try:
        async with asyncio.timeout(config.export_timeout_seconds):
            outputs |= await _snapshot(ctx, gateway, config, instance, name)
    except TimeoutError:
        raise StepFailed(
            f"saving the env's state took longer than export_timeout_seconds ({config.export_timeout_seconds:g}s)"
        ) from None
    return outputs


def _instance(ctx: StepContext, config: SnapshotConfig) -> str:
    """The env instance: the deploy_env step's, or `env_instance_id` if it is one of this run's."""
    if config.env is not None:
        return instance_id(ctx, config.env)
    given = str(config.env_instance_id)
    if not given.startswith(f"{ctx.run_id}.") or given == f"{ctx.run_id}.":
        raise StepFailed(
            f"env_instance_id {given!r} is no env instance of this run (they are RUN_ID.STEP): "
            "write ${run.id}.STEP with the id of the deploy_env step, or give `env_id`"
        )
    return given


async def _snapshot(
    ctx: StepContext, gateway: GatewayClient, config: SnapshotConfig, instance: str, name: str
) -> JsonObject:
    blob = await gateway.snapshot(instance)
    key = snapshot_key(ctx.run_id, name)
    await ctx.stores.aio.objects.put(key, blob)
    if isinstance(pool := unrouted(gateway), GatewayPool):  # the state a gateway taking the instance over starts from
        await in_thread(pool.snapshot_taken, ctx.stores, instance, key)
    outputs: JsonObject = {"snapshot": key, "bytes": len(blob)}
    if config.include_env_changes:
        outputs["env_changes"] = await env_changes.capture(
            ctx, gateway, instance, keys.snapshot_changes(ctx.run_id, name)
        )
    if config.snapshot_id is not None:
        data = exported_by_app(await gateway.data(instance, "data/get"))
        lineage = Lineage(run_id=ctx.run_id, step=ctx.step_id, source=key)
        registry = Registry(ctx.stores.documents, ctx.stores.objects)
        try:
            pin = await in_thread(
                push_universe, registry, config.snapshot_id, data, lineage, config.original_universe_artifact_id
            )
        except BadInput as e:
            raise StepFailed(f"the capture into universe {config.snapshot_id!r} failed: {e}") from None
        outputs |= {
            "environment_universe_artifact_id": pin.id,
            "environment_universe_artifact_version": pin.version,
            "environments_snapshotted": sorted(data),
        }
    return outputs


def snapshot_key(run_id: str, name: str) -> str:
    return keys.snapshot(run_id, name)


class RestoreConfig(EnvStep):
    snapshot: str = Field(description="a snapshot's name in this run, or its object key")


@step_type("restore_env", config=RestoreConfig, timeout="10m", step_refs=("env",))
async def restore_env(ctx: StepContext, config: RestoreConfig) -> JsonObject:
    """Put an environment back into a saved state."""
    key = config.snapshot if "/" in config.snapshot else snapshot_key(ctx.run_id, config.snapshot)
    if not await ctx.stores.aio.objects.exists(key):
        raise StepFailed(f"no snapshot {config.snapshot!r} (looked for {key}); take one with a snapshot_env step")
    await (await ctx.gateway()).restore(instance_id(ctx, config.env), await ctx.stores.aio.objects.get(key))
    return {"restored": key}
