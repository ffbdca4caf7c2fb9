"""An episode: a task run in which a trainer's model plays some of the agents.

`EpisodeSpec.from_task` turns the named agents into trainer-played ones and refuses what an outside
player cannot stand behind (naming the step). Everything else is the task as `agent-env run` runs it:
the same workflow, so an episode's rewards are exactly the task's scores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from agent_env.errors import BadInput
from agent_env.spec.run import RunInput
from agent_env.spec.task import TaskSpec

if TYPE_CHECKING:
    from agent_env.config import Settings


class EpisodeSpec(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    task: TaskSpec
    trainer_agents: list[str] = Field(min_length=1, description="deploy_agent steps the trainer plays (their names)")
    turn_timeout: float = Field(900, gt=0, description="seconds the run waits for each of the trainer's turns")
    seed: int = Field(0, description="seeds everything seeded in the run; recorded on it")
    # The task planned once (records pinned, data stored) for the settings it was planned with: each episode
    # is that plan under a new run id, so starting one does no planning.
    _planned: tuple[Any, RunInput] | None = PrivateAttr(None)

    def planned(self, settings: Settings, run_id: str) -> RunInput:
        if self._planned is None or self._planned[0] is not settings:
            from agent_env.planning.runs import plan

            self._planned = (settings, plan(self.task, run_id, settings))
        return self._planned[1].model_copy(update={"run_id": run_id})

    @classmethod
    def from_task(
        cls, task: TaskSpec | str, trainer_agents: list[str], *, turn_timeout: float = 900, seed: int | None = None
    ) -> EpisodeSpec:
        """The task with `trainer_agents` (a deploy_agent step's id, its agent's name or its `as` name)
        played by the trainer."""
        from agent_env.planning.tasks import find_task, parse_task

        if isinstance(task, str):
            task = find_task(task)
        data = task.model_dump(mode="json", exclude_none=True)
        if seed is not None:
            data["seed"] = seed
        steps = {s["id"]: s for s in data["steps"]}
        played = _trainer_steps(task, trainer_agents)
        for step_id, record in played.items():
            config = steps[step_id]["config"]
            config.pop("agent", None)
            config["record"] = {
                "name": record.name,
                "version": record.version,
                "description": record.description,
                "type": "trainer",
                "role": record.role,
            }
        _refuse_what_a_trainer_cannot_play(task, played)
        for step in data["steps"]:
            if step["type"] == "prompt_agent" and _sides(step["config"]) & set(played):
                step["config"]["turn_deadline"] = f"{turn_timeout:g}s"
                step["timeout"] = _step_timeout(step["config"], turn_timeout)
        spec = parse_task(data, f"task {task.id} as an episode", task.bundle)
        return cls(task=spec, trainer_agents=trainer_agents, turn_timeout=turn_timeout, seed=spec.seed)

    def with_seed(self, seed: int) -> EpisodeSpec:
        """The same episode with another seed (e.g. a Gymnasium reset(seed=...))."""
        task = self.task.model_copy(update={"seed": seed})
        task._bundle = self.task.bundle
        episode = self.model_copy(update={"task": task, "seed": seed})
        episode._planned = None  # another seed: another plan
        return episode

    async def start(self, episodes=None, *, run_id: str | None = None):
        """Start the episode's run. `episodes`: an `Episodes` connection (default: this process's)."""
        from agent_env.episodes.client import Episodes

        episodes = episodes or await Episodes.default()
        return await episodes.start(self, run_id=run_id)

    async def start_group(self, size: int, episodes=None, *, seeds: list[int] | None = None, **kwargs: Any):
        """`size` rollouts from one start state (agent_env.episodes.group): `.episodes`, `await .results()`."""
        from agent_env.episodes.client import Episodes

        episodes = episodes or await Episodes.default()
        return await episodes.start_group(self, size, seeds=seeds, **kwargs)


def _sides(config: dict[str, Any]) -> set[str]:
    partner = (config.get("conversation") or {}).get("partner")
    return cast(set[str], {config.get("agent"), partner} - {None})


def _step_timeout(config: dict[str, Any], turn_timeout: float) -> str:
    """Long enough for every turn of the prompt to use its whole deadline."""
    turns = (config.get("conversation") or {}).get("max_turns", 6) * 2 if config.get("conversation") else 1
    return f"{int(turn_timeout * turns + 600)}s"


def _trainer_steps(task: TaskSpec, names: list[str]) -> dict[str, Any]:
    """deploy_agent step id -> the agent's record, for each agent the trainer plays."""
    from agent_env.bundles import find_agent
    from agent_env.spec.agent import AgentRecord

    known: dict[str, tuple[str, Any]] = {}
    for step in task.steps:
        if step.type != "deploy_agent":
            continue
        config = step.config
        record = (
            AgentRecord.model_validate(config["record"])
            if config.get("record")
            else find_agent(task.bundle, config["agent"])
        )
        for name in cast(set[str], {step.id, record.name, config.get("as")} - {None}):
            known.setdefault(name, (step.id, record))
    played: dict[str, Any] = {}
    for name in names:
        if name not in known:
            listed = sorted({f"{sid} ({r.name})" for sid, r in known.values()})
            raise BadInput(
                f"task {task.id!r} deploys no agent {name!r}",
                "name a deploy_agent step, its agent or its `as` name; the task's agents: "
                + (", ".join(listed) or "none"),
            )
        step_id, record = known[name]
        played[step_id] = record
    return played


def _refuse_what_a_trainer_cannot_play(task: TaskSpec, played: dict[str, Any]) -> None:
    for step in task.steps:
        if step.type == "rubric_judge" and step.config.get("judge") in played:
            raise BadInput(
                f"step {step.id!r} has {step.config['judge']!r} judge the others: a trainer's model "
                "cannot grade the episode it plays in",
                "train a different agent, or grade with the judge model (leave out `judge`)",
            )
    for trigger in task.triggers:
        for action in trigger.actions:
            if getattr(action, "by", None) in played:
                raise BadInput(
                    f"trigger {trigger.id!r} instructs {action.by!r}: world events cannot wait for an "  # type: ignore[union-attr]  # (has `by`: above)
                    "outside player",
                    "let the templated `reply` act for it, or train another agent",
                )
