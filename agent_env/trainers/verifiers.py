"""agentenv tasks as verifiers environments (PrimeIntellect's `verifiers`, the `verifiers` extra):

    from agent_env.trainers.verifiers import load_environment
    env = load_environment(task="refund", seeds=[0, 1])     # or eval="smoke" (bundle="path/to/bundle")
    results = await env.evaluate(vf.OpenAIChatCompletionsClient(AsyncOpenAI(...)), model="...",
                                 rollouts_per_example=4)    # or env.generate(...), as a trainer calls it
    results["outputs"][0]["reward"]                         # the run's score

`vf.load_environment("agent_env.trainers.verifiers", task="refund")` (and `vf-eval agent_env.trainers.verifiers
-a '{"task": "refund"}'`) finds it too. The dataset is one row per task and seed (`info`: the task, its seed and
its row); verifiers repeats each row `rollouts_per_example` times, every rollout of a row from the same seed.

Each rollout is an episode of the task (agent_env.episodes): it starts as the rollout does, the turn's system
prompt and prompt are the rollout's prompt, the played role's tools (as the gateway lists them for it) are the
rollout's tools, and the model's tool calls call them through the episode. Its final answer (a message without
tool calls) ends the turn; when the run offers the trainer another turn (a conversation), its prompt is the next
user message. The base class is `vf.MultiTurnEnv`: `ToolEnv` and `StatefulToolEnv` fix their tools when the
environment is made and call them without the rollout's state, while here each rollout's tools are its role's,
on its own instance.

Rewards: the rubric's reward is the run's score (`agent-env run`'s); each score step's value (`score/STEP`) and
each check's row (`check/STEP/NAME`: 1 passed, 0 not) are metrics beside it (weight 0). A rollout that stops
before its episode ends (max_turns, timeout, an error, cancellation) abandons the episode in its cleanup: the run
is recorded cancelled and its instances released, and the rollout scores 0 (it did not finish the task).
A run that could not grade the rollout (it ended in error, was cancelled from outside, or the episode's services
failed) raises `EpisodeInfraError`, a `vf.InfraError`: verifiers records it as the rollout's `error` (retried
under `max_retries`, as it retries its own infrastructure errors) and a trainer drops such rollouts; it is never
the task's score. A task that cannot be played (BadInput) raises as it is.

verifiers' `Environment` sets SIGINT/SIGTERM handlers when it is made (to tear environments down); an episode
needs the install's Temporal server and gateway (`Episodes.connect()`, or pass `episodes=`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import httpx
import verifiers as vf
from datasets import Dataset
from temporalio.service import RPCError
from verifiers.types import Tool, ToolMessage, UserMessage
from verifiers.utils.message_utils import normalize_messages

from agent_env.agents.sdk import ToolFailed
from agent_env.episodes import Episode, EpisodeInfrastructureError, Episodes, EpisodeSpec, Turn
from agent_env.errors import AgentEnvError, BadInput
from agent_env.spec.run import RunState
from agent_env.spec.task import TaskSpec
from agent_env.task_lookup import Task, bundle_folder, eval_tasks, evals_to_run

# What the workflow records as a run's error when its trainer gave it up (agent_env.workflows).
# How long a rollout's cleanup waits for an abandoned run to end (its instances released).
RELEASE_SECONDS = 120.0
# Failures of what an episode runs on (not of the policy): Temporal, the gateway, the network, the run.
INFRASTRUCTURE = (AgentEnvError, RPCError, httpx.HTTPError, OSError, TimeoutError)


class EpisodeInfraError(vf.InfraError):
    """The episode's run could not grade the rollout (it ended in error, was cancelled from outside, or the
    services it runs on failed): the rollout's `error`, never a score. `run_id` names the run, if it started."""

    def __init__(self, message: str, run_id: str | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id


def load_environment(
    task: str | TaskSpec | list[str | TaskSpec] | None = None,
    eval: str | None = None,
    *,
    bundle: str | None = None,
    seeds: list[int] | None = None,
    trainer_agents: list[str] | None = None,
    turn_timeout: float | None = None,
    max_turns: int = 30,
    episodes: Episodes | None = None,
    **options: Any,
) -> VerifiersEnv:
    """A verifiers environment over `task` (an id as `Task.get` finds it, a TaskSpec, or a list of them) or over
    the tasks of `eval` (the bundle's `evals/NAME.toml` when `bundle` names one, else the registry's). `seeds`:
    a dataset row per task and seed (default [0]). `trainer_agents`, `turn_timeout`: as `EpisodeSpec.from_task`.
    `max_turns`: the model's calls per rollout. `episodes`: the connection (default: one made on first use, from
    the install's settings). Other options go to `vf.MultiTurnEnv` (e.g. `timeout_seconds`)."""
    if (task is None) == (eval is None):
        raise BadInput(
            "give a task or an eval", 'e.g. load_environment(task="refund") or load_environment(eval="smoke")'
        )
    if eval is not None:
        found = evals_to_run(bundle, [eval])[0]
        tasks: list[TaskSpec] = eval_tasks(found, bundle_folder(bundle))
    else:
        named = task if isinstance(task, list) else [task]
        tasks = [Task.get(t) if isinstance(t, str) else t for t in named]  # type: ignore[misc]  # (not None: above)
    specs = []
    for one in tasks:
        base = EpisodeSpec.from_task(one, trainer_agents, turn_timeout=turn_timeout)
        specs += [base.with_seed(seed) for seed in seeds or [0]]
    return VerifiersEnv(specs, episodes=episodes, max_turns=max_turns, **options)


class EpisodeRubric(vf.Rubric):
    """The run's score as the reward; each score step's value and each check's row as metrics beside it."""

    def __init__(self) -> None:
        super().__init__(funcs=[self.task_score], weights=[1.0])

    async def task_score(self, state: vf.State) -> float:
        """The run's score (0 for a rollout whose episode did not finish or errored: see `error`)."""
        result = _rollout(state).result
        return float(result.score or 0.0) if result is not None else 0.0

    async def score_rollout(self, state: vf.State) -> None:
        await super().score_rollout(state)
        state["metrics"].update(_components(state))

    async def score_group(self, states: list[vf.State]) -> None:
        await super().score_group(states)
        for state in states:
            state["metrics"].update(_components(state))


def _components(state: vf.State) -> dict[str, float]:
    result = _rollout(state).result
    if result is None:
        return {}
    metrics: dict[str, float] = {}
    for sid, step in result.steps.items():
        if step.score is None:
            continue
        metrics[f"score/{sid}"] = step.score.value
        for row in step.score.criteria:
            metrics[f"check/{sid}/{row.name}"] = float(row.passed)
    return metrics


class _Rollout:
    """One rollout's episode: its turn, the turn's tools (held open across the model's calls), its end."""

    def __init__(self) -> None:
        self.episode: Episode | None = None
        self.turn: Turn | None = None
        self.tools: Any = None
        self.tool_defs: list[Tool] = []
        self.result: RunState | None = None  # the run's record, once it ended with a score
        self._open = contextlib.AsyncExitStack()

    async def take(self, turn: Turn) -> None:
        """The run's next turn for the trainer: its tools listed (those of the role, on its instance)."""
        await self._open.aclose()
        self.turn, self.tools, self.tool_defs = turn, None, []
        if turn.offer.env:
            self.tools = await self._open.enter_async_context(turn.tools())
            self.tool_defs = [
                Tool(name=t["name"], description=t.get("description") or "", parameters=t["inputSchema"])
                for t in self.tools.list()
            ]

    @property
    def over(self) -> bool:
        return self.episode is not None and self.turn is None

    async def close(self) -> None:
        await self._open.aclose()


def _rollout(state: vf.State) -> _Rollout:
    return state.setdefault("agentenv", _Rollout())


class VerifiersEnv(vf.MultiTurnEnv):
    """A verifiers environment whose rollouts are agentenv episodes (see the module's docstring)."""

    def __init__(self, specs: list[EpisodeSpec], *, episodes: Episodes | None = None, **kwargs: Any) -> None:
        self.specs = specs
        rows = [
            {
                "question": _first_prompt(spec),
                "info": {"task_id": spec.task.id, "version": spec.task.version, "seed": spec.seed, "row": i},
            }
            for i, spec in enumerate(specs)
        ]
        dataset = Dataset.from_list(rows)
        super().__init__(dataset=dataset, eval_dataset=dataset, rubric=EpisodeRubric(), **kwargs)
        self._episodes, self._own = episodes, episodes is None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def connection(self) -> Episodes:
        """The episode connection: the one given, or one made (once per event loop) from the install's settings."""
        loop = asyncio.get_running_loop()
        if self._own and (self._episodes is None or self._loop is not loop):
            self._episodes, self._loop = await Episodes.connect(), loop
        assert self._episodes is not None
        return self._episodes

    async def setup_state(self, state: vf.State) -> vf.State:
        rollout = _rollout(state)
        spec = self.specs[state["info"]["row"]]
        try:
            rollout.episode = await spec.start(await self.connection())
            turn = await rollout.episode.next_turn()
            if turn is None:
                await self._finish(rollout)
                raise EpisodeInfraError(f"run {rollout.episode.run_id} ended before the trainer's first turn")
            await rollout.take(turn)
        except BadInput:
            raise
        except INFRASTRUCTURE as e:
            raise _infra(e, rollout) from e
        system = [{"role": "system", "content": turn.system_prompt}] if turn.system_prompt else []
        state["prompt"] = normalize_messages([*system, {"role": "user", "content": turn.prompt}], field_name="prompt")
        state["tool_defs"] = rollout.tool_defs
        state["run_id"] = rollout.episode.run_id
        return state

    async def add_trajectory_step(self, state: vf.State, trajectory_step: Any) -> None:
        """The model's answer without tool calls ends its turn: the run takes it and offers the next turn, if
        any (the next env response is its prompt), else the episode is over and its result is read."""
        await super().add_trajectory_step(state, trajectory_step)
        last = trajectory_step["completion"][-1] if trajectory_step["completion"] else None
        if last is None or getattr(last, "tool_calls", None):
            return
        rollout = _rollout(state)
        try:
            await rollout.turn.end(_text(last.content))  # type: ignore[union-attr]  # (a turn is open: setup_state)
            turn = await rollout.episode.next_turn()  # type: ignore[union-attr]
            if turn is None:
                await rollout.close()
                rollout.turn = None
                await self._finish(rollout)
                return
            await rollout.take(turn)
        except BadInput:
            raise
        except INFRASTRUCTURE as e:
            raise _infra(e, rollout) from e
        state["tool_defs"] = rollout.tool_defs

    @vf.stop(priority=50)
    async def episode_over(self, state: vf.State) -> bool:
        return _rollout(state).over

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs: Any) -> vf.Messages:
        rollout = _rollout(state)
        last = messages[-1]
        calls = getattr(last, "tool_calls", None)
        if not calls:  # the turn ended (add_trajectory_step): the run's next prompt
            return [UserMessage(content=rollout.turn.prompt)]  # type: ignore[union-attr]  # (not over: a stop)
        return [ToolMessage(tool_call_id=call.id, content=await self._call(rollout, call)) for call in calls]

    async def _call(self, rollout: _Rollout, call: Any) -> str:
        if rollout.tools is None:
            return "this turn has no environment: it has no tools"
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as e:
            return f"the arguments are not JSON: {e}"
        try:
            return json.dumps(await rollout.tools.call(call.name, arguments))
        except ToolFailed as e:
            return f"error: {e}"
        except INFRASTRUCTURE as e:
            raise _infra(e, rollout) from e

    async def _finish(self, rollout: _Rollout) -> None:
        """The ended run's record; EpisodeInfraError when it could not grade the rollout (`Episode.outcome`: an
        error, a cancellation from outside, a grading step that failed)."""
        assert rollout.episode is not None
        try:
            await rollout.episode.outcome()
        except EpisodeInfrastructureError as e:
            raise EpisodeInfraError(str(e), e.run_id) from e
        rollout.result = rollout.episode.state

    @vf.cleanup
    async def release_episode(self, state: vf.State) -> None:
        """A rollout that stopped before its episode ended abandons it and waits for its run to end (its
        instances released), even when the rollout was cancelled."""
        rollout = _rollout(state)
        await rollout.close()
        if rollout.episode is None or rollout.episode.state is not None:
            return
        reason = f"the rollout stopped: {state.get('stop_condition') or 'cancelled'}"
        await asyncio.shield(self._abandon(rollout.episode, reason))

    async def _abandon(self, episode: Episode, reason: str) -> None:
        with contextlib.suppress(*INFRASTRUCTURE):
            await episode.abandon(reason)
            await asyncio.wait_for(episode.result(), RELEASE_SECONDS)

    @vf.teardown
    async def close_connection(self) -> None:
        if self._own and self._episodes is not None and self._loop is asyncio.get_running_loop():
            await self._episodes.close()
            self._episodes = None


def _infra(e: BaseException, rollout: _Rollout) -> EpisodeInfraError:
    if isinstance(e, EpisodeInfraError):
        return e
    run_id = rollout.episode.run_id if rollout.episode is not None else None
    where = f"run {run_id}" if run_id else "the episode"
    return EpisodeInfraError(f"{where} failed: {type(e).__name__}: {e}", run_id)


def _first_prompt(spec: EpisodeSpec) -> str:
    """The prompt of the first prompt step the trainer plays in, as the task writes it (the rollout's own prompt
    is the turn's, as the run renders it)."""
    played = {
        s.id
        for s in spec.task.steps
        if s.type == "deploy_agent" and (s.config.get("record") or {}).get("type") == "trainer"
    }
    for step in spec.task.steps:
        if step.type == "prompt_agent" and step.config.get("agent") in played:
            return str(step.config.get("prompt") or spec.task.id)
    return spec.task.id


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(str(getattr(p, "text", None) or (p.get("text") if isinstance(p, dict) else "")) for p in content)
    return ""
