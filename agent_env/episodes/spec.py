"""An episode: a task run in which a trainer's model plays some of the agents.

`EpisodeSpec.from_task` turns the agents the trainer plays (by default the task's only prompted one) into
trainer-played ones and refuses what an outside player cannot stand behind (naming the step). Everything else
is the task as `agent-env run` runs it: the same workflow, so an episode's rewards are exactly the task's scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from agent_env.agents.conversation import PromptAgentConfig
from agent_env.bundles import find_agent
from agent_env.config import ModelSettings
from agent_env.episodes.client import Episodes
from agent_env.errors import BadInput
from agent_env.planning.runs import plan
from agent_env.planning.tasks import parse_task
from agent_env.spec.agent import AgentRecord
from agent_env.spec.duration import MAX_SECONDS, Duration
from agent_env.spec.named_steps import agent_names
from agent_env.spec.run import RunInput, StepPlan
from agent_env.spec.task import TaskSpec
from agent_env.task_lookup import Task

if TYPE_CHECKING:
    from agent_env.config import Settings


class EpisodeSpec(BaseModel):
    """A task with some of its agents played by a trainer's model: make one with `from_task`, then `start()` an
    episode (or `start_group(n)` rollouts). The run is the task's own workflow, so the rewards are its scores."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    task: TaskSpec
    trainer_agents: list[str] = Field(description="deploy_agent steps the trainer plays (their names)")
    proxied_agents: dict[str, str] = Field(
        default_factory=dict,
        description="deploy_agent steps the trainer plays through their proxy (proxy/v1): name -> the step's id",
    )
    recorded_agents: dict[str, str] = Field(
        default_factory=dict,
        description="hosted model-driven agents whose model calls go through the token recorder: name -> step id",
    )
    recorder: str | None = Field(
        None, description="the token recorder's URL (agent_env.episodes.recording), when agents are recorded"
    )
    recorder_api_key: str | None = Field(
        None, description="the recorder's key, as a `secret:NAME` reference (its value never enters the plan)"
    )
    turn_timeout: float | None = Field(
        None, gt=0, description="seconds the run waits for each of the trainer's turns (None: each prompt's own)"
    )
    seed: int = Field(0, description="seeds everything seeded in the run; recorded on it")
    # The task planned once (records pinned, data stored) for the settings it was planned with: each episode
    # is that plan under a new run id, so starting one does no planning.
    _planned: tuple[Any, RunInput] | None = PrivateAttr(None)

    def planned(self, settings: Settings, run_id: str) -> RunInput:
        """The run's plan under `run_id` (planned once per settings, then reused: starting an episode plans
        nothing)."""
        if self._planned is None or self._planned[0] is not settings:
            self._planned = (settings, plan(self.task, run_id, settings))
        planned = self._planned[1].model_copy(update={"run_id": run_id})
        if self.recorded_agents and self.recorder:
            steps = [self._recorded(step, run_id) for step in planned.steps]
            planned = planned.model_copy(update={"steps": steps})
        return planned

    def _recorded(self, step: StepPlan, run_id: str) -> StepPlan:
        """A recorded agent's deploy step, its model endpoint moved to the recorder under this episode's key (the
        run id: an identifier, not a credential). The configured key stays with its own origin (`overridden`)."""
        if step.id not in self.recorded_agents.values():
            return step
        url = f"{self.recorder.rstrip('/')}/episodes/{run_id}/v1"  # type: ignore[union-attr]  # (checked by the caller)
        override = {"base_url": url, "api_key": self.recorder_api_key}
        models = {
            purpose: ModelSettings.model_validate(endpoint).overridden(override).model_dump(mode="json")
            for purpose, endpoint in (step.config.get("models") or {}).items()
        }
        return step.model_copy(update={"config": {**step.config, "models": models}})

    @classmethod
    def from_task(
        cls,
        task: TaskSpec | str,
        trainer_agents: Sequence[str] | None = None,
        *,
        turn_timeout: float | None = None,
        seed: int | None = None,
        proxied_agents: Sequence[str] = (),
        recorded_agents: Sequence[str] = (),
        recorder: str | None = None,
        recorder_api_key: str | None = None,
    ) -> EpisodeSpec:
        """The task with `trainer_agents` played by the trainer: deploy_agent steps, each named by its id, its
        agent's name or its `as` name; by default the one agent the task prompts (with several, name them).
        `turn_timeout`: every played turn's deadline in seconds; by default each prompt's own `turn_deadline`.
        `proxied_agents`: agents the run deploys and prompts as it would, which are proxies (proxy/v1) the trainer
        plays through `episode.proxy(name)`: their tools and bash run where they live. `recorded_agents`: hosted
        model-driven agents (llm, persona) the run prompts as it would, whose model calls go through the token
        recorder at `recorder` (agent_env.episodes.recording; `recorder_api_key`: its key as `secret:NAME`), so
        `episode.trajectory()` has the exact tokens they sampled."""
        if isinstance(task, str):
            task = Task.get(task)
        if turn_timeout is not None:
            _check_turn_timeout(turn_timeout)
        deployed = _deployed_agents(task)
        proxied = _trainer_steps(task, _named(task, proxied_agents), deployed) if proxied_agents else {}
        recorded = _recorded_steps(task, recorded_agents, recorder, deployed)
        if trainer_agents is None and (proxied or recorded):
            trainer_agents = []
        names = (
            _prompted_agent(task, deployed)
            if trainer_agents is None
            else _named(task, trainer_agents, bool(proxied or recorded))
        )
        data = task.model_dump(mode="json", exclude_none=True)
        if seed is not None:
            data["seed"] = seed
        steps = {s["id"]: s for s in data["steps"]}
        played = _trainer_steps(task, names, deployed)
        if set(played) & set(recorded.values()):
            raise BadInput(
                f"agents {sorted(set(played) & set(recorded.values()))} are both played by the trainer and recorded",
                "a trainer's own loop calls its model itself: record only hosted agents (recorded_agents)",
            )
        if set(played) & set(proxied):
            raise BadInput(
                f"agents {sorted(set(played) & set(proxied))} are both played by the trainer and through a proxy",
                "name each agent in trainer_agents or in proxied_agents, not both",
            )
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
                if turn_timeout is not None:
                    step["config"]["turn_deadline"] = f"{turn_timeout:g}s"
                deadline = turn_timeout if turn_timeout is not None else _own_deadline(step)
                step["timeout"] = _step_timeout(step["config"], deadline)
        spec = parse_task(data, f"task {task.id} as an episode", task.bundle)
        through = {name: step_id for name in proxied_agents for step_id in _trainer_steps(task, [name], deployed)}
        return cls(
            task=spec,
            trainer_agents=names,
            proxied_agents=through,
            recorded_agents=recorded,
            recorder=recorder if recorded else None,
            recorder_api_key=recorder_api_key if recorded else None,
            turn_timeout=turn_timeout,
            seed=spec.seed,
        )

    def with_seed(self, seed: int) -> EpisodeSpec:
        """The same episode with another seed (e.g. a Gymnasium reset(seed=...))."""
        task = self.task.model_copy(update={"seed": seed})
        task._bundle = self.task.bundle
        episode = self.model_copy(update={"task": task, "seed": seed})
        episode._planned = None  # another seed: another plan
        return episode

    async def start(self, episodes=None, *, run_id: str | None = None):
        """Start the episode's run. `episodes`: an `Episodes` connection (default: this process's)."""
        episodes = episodes or await Episodes.default()
        return await episodes.start(self, run_id=run_id)

    async def start_group(self, size: int, episodes=None, *, seeds: list[int] | None = None, **kwargs: Any):
        """`size` rollouts from one start state (agent_env.episodes.group): `.episodes`, `await .results()`."""
        episodes = episodes or await Episodes.default()
        return await episodes.start_group(self, size, seeds=seeds, **kwargs)


def _recorded_steps(
    task: TaskSpec, names: Sequence[str], recorder: str | None, deployed: dict[str, AgentRecord]
) -> dict[str, str]:
    """name -> deploy_agent step id of each agent whose model calls the recorder records (hosted, model-driven)."""
    if not names:
        return {}
    if not isinstance(recorder, str) or not recorder.startswith(("http://", "https://")):
        raise BadInput(
            f"recorded_agents {list(names)} need the token recorder's URL, not {recorder!r}",
            "start one (`agent-env models record --upstream URL`, or RecorderServer(upstream)) and pass "
            "recorder='http://127.0.0.1:PORT'",
        )
    steps = {name: step_id for name in _named(task, names) for step_id in _trainer_steps(task, [name], deployed)}
    for name, step_id in steps.items():
        record = deployed[step_id]
        if record.type not in ("llm", "persona") or not record.needs_model():
            raise BadInput(
                f"agent {name!r} is a {record.type} agent: only hosted agents that call a model (llm, persona with "
                "llm) are recorded",
                "record an llm agent; a trainer's own loop records its own model's tokens",
            )
    return steps


def _sides(config: dict[str, Any]) -> set[str]:
    return set(_prompted_sides(config))


def _prompted_sides(config: dict[str, Any]) -> list[str]:
    """The deploy_agent steps a prompt's config prompts: its agent, then its conversation's partner."""
    partner = (config.get("conversation") or {}).get("partner") or config.get("user_agent")  # (the framework's name)
    return [side for side in (config.get("agent"), partner) if isinstance(side, str)]


def _own_deadline(step: dict[str, Any]) -> float:
    """A prompt step's own turn deadline, in seconds (the prompt_agent default when it sets none)."""
    from pydantic import TypeAdapter, ValidationError

    value = step["config"].get("turn_deadline", PromptAgentConfig.model_fields["turn_deadline"].default)
    try:
        return TypeAdapter(Duration).validate_python(value).total_seconds()
    except ValidationError:  # a ${...} reference: known only when the run resolves it
        raise BadInput(
            f"step {step['id']!r} sets its turn_deadline only when the run starts ({value!r})",
            "give the episode its turns' deadline: EpisodeSpec.from_task(task, turn_timeout=SECONDS)",
        ) from None


def _step_timeout(config: dict[str, Any], turn_timeout: float) -> str:
    """Long enough for every turn of the prompt to use its whole deadline."""
    turns = (config.get("conversation") or {}).get("max_turns", 6) * 2 if config.get("conversation") else 1
    return f"{int(turn_timeout * turns + 600)}s"


def _check_turn_timeout(turn_timeout: Any) -> None:
    if (
        isinstance(turn_timeout, bool)
        or not isinstance(turn_timeout, int | float)
        or not 0 < turn_timeout <= MAX_SECONDS
    ):
        raise BadInput(
            f"turn_timeout must be a number of seconds above 0, not {turn_timeout!r}",
            "give e.g. turn_timeout=900, or leave it out for each prompt's own turn_deadline",
        )


def _deployed_agents(task: TaskSpec) -> dict[str, AgentRecord]:
    """deploy_agent step id -> the record of the agent it deploys."""
    return {
        step.id: (
            AgentRecord.model_validate(step.config["record"])
            if step.config.get("record")
            else find_agent(task.bundle, step.config["agent"])
        )
        for step in task.steps
        if step.type == "deploy_agent"
    }


def _described(task: TaskSpec, step_id: str, deployed: dict[str, AgentRecord]) -> str:
    """`support (escalations, as sam)`: a deploy_agent step by every name a user may give it."""
    alias = task.step(step_id).config.get("as")
    names = [deployed[step_id].name] + ([f"as {alias}"] if alias else [])
    return f"{step_id} ({', '.join(names)})"


def _prompted_agent(task: TaskSpec, deployed: dict[str, AgentRecord]) -> list[str]:
    """The trainer's agent when none is named: the one agent the task prompts."""
    prompted = list(
        dict.fromkeys(
            side
            for s in task.steps
            if s.type == "prompt_agent"
            for side in _prompted_sides(s.config)
            if side in deployed
        )
    )
    if len(prompted) == 1:
        return prompted
    if not prompted:
        raise BadInput(
            f"task {task.id!r} prompts no agent: an episode would have no turn for the trainer to play",
            "add a prompt_agent step for the agent to play (and name it with trainer_agents=[...]), "
            "or run the task as it is with `agent-env run`",
        )
    listed = ", ".join(_described(task, step_id, deployed) for step_id in prompted)
    raise BadInput(
        f"task {task.id!r} prompts {len(prompted)} agents: {listed}; the episode cannot tell which the trainer plays",
        f"name the ones you play, e.g. EpisodeSpec.from_task(task, trainer_agents=[{prompted[0]!r}]); any of "
        f"{', '.join(map(repr, prompted))} (or its agent's name or `as` name); the others stay hosted",
    )


def _named(task: TaskSpec, trainer_agents: Sequence[str], none_ok: bool = False) -> list[str]:
    if isinstance(trainer_agents, str) or not all(isinstance(n, str) for n in trainer_agents):
        raise BadInput(
            f"trainer_agents must be a list of agent names, not {trainer_agents!r}",
            f"e.g. trainer_agents=[{trainer_agents!r}]" if isinstance(trainer_agents, str) else "e.g. ['agent']",
        )
    if not trainer_agents and not none_ok:
        raise BadInput(
            f"trainer_agents names no agent of task {task.id!r}",
            "name the agents you play, or leave trainer_agents out when the task prompts one agent",
        )
    return list(dict.fromkeys(trainer_agents))


def _trainer_steps(task: TaskSpec, names: list[str], deployed: dict[str, AgentRecord]) -> dict[str, AgentRecord]:
    """deploy_agent step id -> the agent's record, for each agent the trainer plays (named by the step's id, its
    agent's name or its `as` name)."""
    known: dict[str, str] = {}
    for step_id, record in deployed.items():
        for name in (step_id, record.name, task.step(step_id).config.get("as")):
            if name is not None:
                known.setdefault(name, step_id)
    played: dict[str, AgentRecord] = {}
    for name in names:
        if name not in known:
            listed = sorted(f"{sid} ({r.name})" for sid, r in deployed.items())
            raise BadInput(
                f"task {task.id!r} deploys no agent {name!r}",
                "name a deploy_agent step, its agent or its `as` name; the task's agents: "
                + (", ".join(listed) or "none"),
            )
        played[known[name]] = deployed[known[name]]
    return played


# What a prompt's own step does and the run, holding a prompt a trainer plays in (workflows.trainer_turns), does not
_NOT_HELD = ("user_a2a_url", "user_agent_timeout_seconds", "user_model", "user_output_format", "snapshot_config",
             "trajectory_output_prefix")  # fmt: skip
_NOT_HELD_IN_CONVERSATION = ("partner_url", "partner_deadline", "partner_model", "partner_output_format")


def _refuse_what_a_trainer_cannot_play(task: TaskSpec, played: dict[str, AgentRecord]) -> None:
    for step in task.steps:
        if step.type == "prompt_agent" and _sides(step.config) & set(played):
            talk = step.config.get("conversation") or {}
            held = [k for k in _NOT_HELD if step.config.get(k) is not None]
            held += [f"conversation.{k}" for k in _NOT_HELD_IN_CONVERSATION if talk.get(k) is not None]
            if held:
                raise BadInput(
                    f"step {step.id!r} sets {', '.join(held)}: a prompt a trainer plays in is held by the run, "
                    "which does not do that",
                    "leave those fields out of the task the episode plays",
                )
        judge = step.config.get("agent_name") if step.type == "rubrics_verifier" else None
        if judge is not None and any(judge in agent_names(task.step(sid)) for sid in played):
            raise BadInput(
                f"step {step.id!r} has {judge!r} judge the others: a trainer's model "
                "cannot grade the episode it plays in",
                "train a different agent, or grade with the judge model (leave out `agent_name`)",
            )
    for trigger in task.triggers:
        for action in trigger.actions:
            if getattr(action, "by", None) in played:
                raise BadInput(
                    f"trigger {trigger.id!r} instructs {action.by!r}: world events cannot wait for an "  # type: ignore[union-attr]  # (has `by`: above)
                    "outside player",
                    "let the templated `reply` act for it, or train another agent",
                )
