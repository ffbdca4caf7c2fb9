"""Environment artifacts and universes loaded into a deployed environment: `load_artifact` with the framework's
`env_id` (the env a deploy_env step of the task deploys) or `env_step_id` (that step's id).

Each artifact (`artifact_id`/`artifact_version`, or `artifacts`) is an environment artifact (one app's data) or a
universe (one per app, loaded together into the composed environment). Its version is pinned when the run is
planned: its data is stored under its content's key, and the run loads those bytes on any worker, however the
registry moves on. `artifact_from_step_id` names a snapshot_env step of this run instead: the universe it
captured (`snapshot_id`) is read when the load runs, at the version that step made.

`pin_environment_data` (agent_env.registry.universes) is the same pinning, for a deploy_env that loads one.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from agent_env.errors import BadInput
from agent_env.gateway_client.wire import JsonObject
from agent_env.registry.universes import pin_environment_data
from agent_env.spec.run import PlannedConfig
from agent_env.spec.templates import ref
from agent_env.steps import PlanContext, StepContext, StepFailed
from agent_env.steps.builtin.envs import deploying_env_step, instance_id
from agent_env.stores import in_thread

if TYPE_CHECKING:
    from agent_env.steps.builtin.bare_sandboxes import LoadArtifactConfig


def into_env_check(config: LoadArtifactConfig) -> None:
    """What a load into an environment needs (ValueError naming the field otherwise)."""
    if config.sandbox_name is not None or config.destination_path is not None:
        raise ValueError("an env's artifacts go into its apps: leave out `sandbox_name` and `destination_path`")
    given = [config.artifact_id is not None, config.artifacts is not None, config.artifact_from_step_id is not None]
    if sum(given) != 1:
        raise ValueError("give exactly one of `artifact_id`, `artifacts` or `artifact_from_step_id`")


def _env_step(config: PlannedConfig, plan: PlanContext) -> str:
    """The deploy_env step the load goes into: `env_step_id`, or the one deploying `env_id`."""
    if config.get("env_step_id"):
        task, step = plan.task, str(config["env_step_id"])
        if task is not None and not any(s.id == step and s.type == "deploy_env" for s in task.steps):
            raise BadInput(
                f"step {plan.step_id!r}: env_step_id {step!r} is no deploy_env step of task {task.id!r}",
                "name the deploy_env step whose environment takes the artifact",
            )
        return step
    return deploying_env_step(str(config["env_id"]), plan)


def prepare_into_env(config: PlannedConfig, plan: PlanContext, refs: list[str]) -> PlannedConfig:
    """The env's deploy step, and each artifact's data pinned (a captured universe: that step's outputs)."""
    config["env"] = _env_step(config, plan)
    pinned = {}
    for artifact in refs:
        name, _, label = artifact.partition("@")
        try:
            key, found = pin_environment_data(plan.stores.documents, plan.stores.objects, name, label or None)
        except BadInput as e:
            raise BadInput(f"step {plan.step_id!r}: {e.problem}", e.fix) from None
        pinned[str(found.pin)] = key
    config["env_data"] = pinned
    if made := config.get("artifact_from_step_id"):
        config["made"] = ref(f"steps.{made}.outputs")
    return config


async def load_into_env(ctx: StepContext, env: str, pinned: dict[str, str], made: JsonObject | None) -> JsonObject:
    """Load each pinned artifact's data (or the universe `made` names) into the env's apps, once."""
    keys = list(pinned.values())
    loaded = list(pinned)
    if made is not None:
        name, version = made.get("environment_universe_artifact_id"), made.get("environment_universe_artifact_version")
        if not name:
            raise StepFailed("the step named by artifact_from_step_id captured no universe (give it a snapshot_id)")
        stores = ctx.stores
        key, found = await in_thread(pin_environment_data, stores.documents, stores.objects, str(name), version)
        keys.append(key)
        loaded.append(str(found.pin))
    parts: list[JsonObject] = []
    apps: set[str] = set()
    for key in keys:
        data: JsonObject = json.loads(await ctx.stores.aio.objects.get(key))
        apps |= set(data)
        parts.append({"kind": "data", "data": data})
    await (await ctx.gateway()).load(instance_id(ctx, env), parts, idempotency_key=ctx.idempotency_key)
    return {"apps": sorted(apps), "loaded": loaded}
