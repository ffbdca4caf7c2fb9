"""Groups of rollouts from one start state, as GRPO-style training runs them:

    group = await spec.start_group(8)                  # or `episodes.start_group(spec, 8, seeds=[...])`
    for episode in group.episodes:                     # each one the normal loop: next_turn, tools, end
        ...
    scores = await group.results()                     # per rollout, in order; the prototype is released

Loading an environment's data is most of what a deploy costs, and every rollout of a group starts from the
same data. So the group deploys each environment once, as a *prototype* (what the task's `deploy_env` step
would deploy, data loaded), and each rollout's `deploy_env` carries `fork_from` = that prototype: the gateway
copies it in milliseconds (SQLite's online backup) instead of loading the data again. The task is planned
once per distinct seed, not once per rollout. Every rollout is still its own run, so its scores are exactly
the task's, and the forks are independent (what one rollout writes, no other sees).

What is not shared, on purpose:
- Hosted agents (scripted partners, model-driven agents, personas) are deployed per rollout, as today: each
  keeps its own conversation state and is deleted at its run's end, so one shared agent would mix rollouts.
- An environment with apps in sandboxes or at URLs is deployed per rollout: a prototype's sandbox would
  belong to no run, and the reaper removes sandboxes of runs Temporal does not know.

The prototype never leaks: it is deleted when the group ends (`results()` returned, or `close()`), and it
carries `expires_at` (now + `ttl`), so the gateway deletes it even if this process died. A rollout that
starts after its prototype is gone loads the data itself (same start state, slower).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from agent_env.bundles import find_env
from agent_env.episodes.client import Episode, Episodes
from agent_env.episodes.outcome import EpisodeInfrastructureError, EpisodeResult
from agent_env.errors import BadInput
from agent_env.planning.tasks import parse_task
from agent_env.spec.env import EnvRecord
from agent_env.steps import StepContext
from agent_env.steps.builtin.deploy_env import DeployConfig, deploy
from agent_env.steps.builtin.envs import instance_id
from agent_env.stores import in_thread, open_stores
from agent_env.temporal import launch

if TYPE_CHECKING:
    from agent_env.episodes.spec import EpisodeSpec
    from agent_env.gateway_client import GatewayClient
    from agent_env.spec.run import RunInput
    from agent_env.spec.task import TaskSpec
    from agent_env.stores import Stores

MAX_SIZE = 256  # rollouts in one group
DEFAULT_TTL = 6 * 3600.0  # seconds a prototype may outlive a trainer that never ended its group


class EpisodeGroup:
    """Rollouts of one task from one start state: `episodes` (each the normal `Episode`), `results()`."""

    def __init__(self, episodes: Episodes, group_id: str, members: list[Episode], prototypes: list[str]) -> None:
        self.connection, self.id, self.episodes = episodes, group_id, members
        self.prototypes = prototypes  # instance ids on the gateway, deleted when the group ends

    async def results(self) -> list[dict[str, float]]:
        """Waits for every rollout to end; each one's scores (by step id), in order. Then the group ends. Raises
        EpisodeInfrastructureError for a rollout that could not be graded (`outcomes()` gives the others too)."""
        try:
            return list(await asyncio.gather(*(episode.result() for episode in self.episodes)))
        finally:
            await self.close()

    async def outcomes(self) -> list[EpisodeResult | EpisodeInfrastructureError]:
        """Waits for every rollout to end; each one's `EpisodeResult`, or the EpisodeInfrastructureError that
        leaves it without a reward (drop or retry that one: the others keep theirs), in order. Then the group ends."""
        try:
            found = await asyncio.gather(*(episode.outcome() for episode in self.episodes), return_exceptions=True)
        finally:
            await self.close()
        for each in found:
            if isinstance(each, BaseException) and not isinstance(each, EpisodeInfrastructureError):
                raise each
        return [each for each in found if isinstance(each, EpisodeResult | EpisodeInfrastructureError)]

    async def close(self) -> None:
        """End the group: its prototypes are deleted (rollouts still running keep their own forks)."""
        if not self.prototypes:
            return
        gateway = await _gateway(self.connection)
        for instance in list(self.prototypes):
            await gateway.delete_instance(instance)
            self.prototypes.remove(instance)

    async def __aenter__(self) -> EpisodeGroup:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def start_group(
    episodes: Episodes, spec: EpisodeSpec, size: int, *, seeds: list[int] | None = None, ttl: float = DEFAULT_TTL
) -> EpisodeGroup:
    """Start `size` rollouts of `spec` from one start state. `seeds`: one per rollout (default: every rollout
    the spec's seed, the same start state); `ttl`: seconds after which the gateway deletes the prototype
    even if this group is never closed."""
    seeds = _check(size, seeds, spec.seed, ttl)
    if spec.recorded_agents:  # a group's rollouts share one plan: they could not each have their own key
        raise BadInput(
            f"a group does not record tokens (recorded_agents {sorted(spec.recorded_agents)})",
            "start the rollouts as single episodes (spec.start()), each recorded under its run id",
        )
    group_id = launch.new_run_id(f"{spec.task.id}-group")
    stores = await in_thread(open_stores, episodes.settings)
    try:
        forkable = _forkable_envs(spec.task)
        plans: dict[int, RunInput] = {}
        for seed in dict.fromkeys(seeds):
            task = _forking(spec.with_seed(seed).task, {step: f"{group_id}.{step}" for step in forkable})
            plans[seed] = await in_thread(launch.plan, task, f"{group_id}-0", episodes.settings)
        expires_at = datetime.now(UTC) + timedelta(seconds=ttl)
        prototypes = await _deploy_prototypes(
            episodes, stores, group_id, spec.task.id, plans[seeds[0]], forkable, expires_at
        )
        group = EpisodeGroup(episodes, group_id, [], prototypes)
        try:
            run_ids = [f"{group_id}-{n}" for n in range(size)]
            await asyncio.gather(
                *(
                    launch.start(
                        episodes.client,
                        episodes.settings,
                        plans[seed].model_copy(update={"run_id": rid}),
                        stores=stores,
                    )
                    for rid, seed in zip(run_ids, seeds, strict=True)
                )
            )
        except BaseException:
            await group.close()
            raise
        group.episodes = [Episode(episodes, rid) for rid in run_ids]
        return group
    finally:
        stores.close()


def _check(size: int, seeds: list[int] | None, seed: int, ttl: float) -> list[int]:
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_SIZE:
        raise BadInput(
            f"size: a group holds 1 to {MAX_SIZE} rollouts, not {size!r}",
            f"start several groups for more than {MAX_SIZE}",
        )
    if seeds is not None and len(seeds) != size:
        raise BadInput(f"seeds: {len(seeds)} given for {size} rollouts", "give one seed per rollout, or none")
    if ttl <= 0:
        raise BadInput(f"ttl: {ttl!r} seconds", "give the prototype a positive lifetime")
    return list(seeds) if seeds is not None else [seed] * size


def _forkable_envs(task: TaskSpec) -> list[str]:
    """The deploy_env steps whose apps all run in the gateway (those a prototype can serve)."""
    steps = []
    for step in task.steps:
        if step.type != "deploy_env":
            continue
        given = step.config.get("record")
        record = EnvRecord.model_validate(given) if given else find_env(task.bundle, step.config["env_id"])[0]
        if all(app.sandbox is None and app.url is None for app in record.apps):
            steps.append(step.id)
    return steps


def _forking(task: TaskSpec, sources: dict[str, str]) -> TaskSpec:
    """The task with each of these deploy_env steps forking its prototype."""
    data = task.model_dump(mode="json", exclude_none=True)
    for step in data["steps"]:
        if step["id"] in sources:
            step["config"]["fork_from"] = sources[step["id"]]
    return parse_task(data, f"task {task.id} as a group", task.bundle)


async def _deploy_prototypes(
    episodes: Episodes,
    stores: Stores,
    group_id: str,
    task_id: str,
    plan: RunInput,
    forkable: list[str],
    expires_at: datetime,
) -> list[str]:
    """Each forkable environment deployed once, as its deploy_env step would (planned record, data loaded),
    under the group's id; all of them deleted again if one fails."""
    deployed: list[str] = []
    gateway = await _gateway(episodes)
    try:
        for step in plan.steps:
            if step.id not in forkable:
                continue
            ctx = StepContext(
                run_id=group_id, task_id=task_id, step_id=step.id, attempt=1, settings=episodes.settings, _stores=stores
            )
            config = DeployConfig.model_validate({**step.config, "fork_from": None})
            deployed.append(instance_id(ctx, step.id))  # before it exists: a half-made one is deleted too
            await deploy(ctx, config, expires_at=expires_at)
    except BaseException:
        for instance in deployed:
            await gateway.delete_instance(instance)
        raise
    return deployed


async def _gateway(episodes: Episodes) -> GatewayClient:
    """The gateway's admin client the steps of this process use (one per process; a pool when configured)."""
    return await StepContext(run_id="", task_id="", step_id="", attempt=0, settings=episodes.settings).gateway()
