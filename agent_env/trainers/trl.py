"""TRL's `environment_factory` on trainer episodes: each rollout is a run of the task, its tools the role's.

    from trl import GRPOConfig, GRPOTrainer
    from agent_env.trainers.trl import environment_factory

    Refund = environment_factory("refund", turn_timeout=300)   # a class: TRL makes one per rollout slot
    trainer = GRPOTrainer(model, args=GRPOConfig(...), train_dataset=rows, environment_factory=Refund)

How TRL uses it (trl >= 1.0; `GRPOTrainer`): it makes instances once and reuses them, calling `reset(**row)` with
the dataset row's columns before each rollout (the string it returns is appended to the row's last user message),
offers the class's public methods to the model as tools (their schemas from signature and docstring), and calls
`get_reward()` once per finished rollout as a reward source named after the class (logged as
`rewards/<task id>/mean`).

- `reset(seed=..., task=..., **row)` starts an episode of the task (a `seed` column seeds the run; without one,
  the factory's `seed`, else the task's); it returns the first turn's prompt, after its system prompt if it has
  one. An episode still open (its rollout never reached `get_reward`) is abandoned first.
- Each tool of the played role (as the gateway lists it when the factory is made: a first episode is started
  for it and abandoned) is a method: its arguments from the tool's input schema, its docstring from the
  descriptions. Calling one calls the tool as that role; it returns the result as JSON text, or raises
  `ToolFailed` with the tool's error (TRL shows the model the error).
- `get_reward()` answers the turn (with the rollout's final message when the `answers` reward function ran
  before it, else an empty one; any later turn of the played agent is answered empty), waits for the run to
  end and returns its score: the task's total, as `agent-env run` reports it (the last `aggregate_verifiers`
  step's score, else the mean of every step's score).
- A run that could not grade the policy (it ended in error, was cancelled from outside, or a tool call failed
  for a reason other than the tool's own error) is no reward: `get_reward` raises `EpisodeInfrastructureError`, or with
  `on_infrastructure_error="drop"` returns None, which TRL counts as an unscorable rollout (no advantage, not in
  the logged means) when no other reward function scores it.
- Episodes end however the trainer stops: an instance dropped with its episode open abandons it, `with` blocks
  and `close_all()` abandon what is open, and so does the process's exit.

Calls are synchronous (TRL's loop is): a background thread runs this process's event loop and its one
`Episodes` connection, shared by every instance (as in `agent_env.episodes.gym`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import inspect
import json
import keyword
import threading
import typing
import weakref
from collections.abc import Callable
from typing import Any, ClassVar, Literal

from agent_env.agents.sdk import ToolFailed
from agent_env.episodes.client import Episode, EpisodeError, Episodes, Turn
from agent_env.episodes.outcome import EpisodeInfrastructureError
from agent_env.episodes.spec import EpisodeSpec
from agent_env.episodes.tools import ToolInfo, TurnTools
from agent_env.errors import AgentEnvError, BadInput
from agent_env.spec.task import TaskSpec

OnFailure = Literal["raise", "drop"]


class _Runtime:
    """This process's event loop (in a daemon thread) and its `Episodes` connections (one per settings),
    shared by every environment instance; it abandons whatever episode is still open when the process exits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="agentenv-trl", daemon=True)
        self.thread.start()
        self._connections: dict[int, asyncio.Task[Episodes]] = {}
        self.open: dict[str, Episode] = {}  # run id -> an episode started and not yet ended or abandoned

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def episodes(self, settings, worker: bool | None) -> Episodes:
        key = id(settings)
        known = self._connections.get(key)
        if known is None or (known.done() and known.exception() is not None):  # (a failed connect is tried again)
            self._connections[key] = asyncio.ensure_future(Episodes.connect(settings, worker=worker))
        return await self._connections[key]

    async def abandon(self, episode: Episode, reason: str) -> None:
        """Give an open episode up and wait until its run ended (its instances released)."""
        if self.open.pop(episode.run_id, None) is None:
            return
        with contextlib.suppress(AgentEnvError):  # (over already: nothing to give up)
            await episode.abandon(reason)
        with contextlib.suppress(EpisodeInfrastructureError):  # (it ended in error first: nothing to score anyway)
            await episode.result()

    async def _shutdown(self) -> None:
        await asyncio.gather(
            *(self.abandon(e, "the trainer process exited") for e in list(self.open.values())),
            return_exceptions=True,
        )
        for connection in self._connections.values():
            if connection.done() and connection.exception() is None:
                await connection.result().close()

    def shutdown(self) -> None:
        if self.loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(60)
            self.loop.call_soon_threadsafe(self.loop.stop)


_runtime: _Runtime | None = None
_runtime_lock = threading.Lock()


def _the_runtime() -> _Runtime:
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = _Runtime()
            atexit.register(_runtime.shutdown)
        return _runtime


class EpisodeEnvironment:
    """One rollout slot: an episode of the class's task at a time. Made by `environment_factory(task)`, which
    adds the role's tools as methods; TRL treats every public function of the class as a tool, so everything
    else here is private, a classmethod, or `reset`/`get_reward`."""

    _spec: ClassVar[EpisodeSpec]
    _agent: ClassVar[str]
    _settings: ClassVar[Any] = None
    _worker: ClassVar[bool | None] = None
    _seed: ClassVar[int | None] = None
    _on_failure: ClassVar[OnFailure] = "raise"
    _instances: ClassVar[weakref.WeakSet[EpisodeEnvironment]]

    def __init__(self) -> None:
        self._runtime = _the_runtime()
        self._episode: Episode | None = None
        self._turn: Turn | None = None
        self._tools: TurnTools | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._broken: str | None = None  # why a tool call failed outside the tool (the gateway, the network)
        self._reward: float | None = None
        self._response = ""  # the rollout's final message, when the `answers` reward function gave it
        self.run_id: str | None = None  # the current (or last) episode's run
        type(self)._instances.add(self)

    # -- what TRL calls --

    def reset(self, seed: int | None = None, task: str | None = None, **row: Any) -> str:
        """Start an episode of the task; returns its first turn's prompt (after its system prompt, if any)."""
        if task is not None and task != self._spec.task.id:
            raise BadInput(
                f"this environment plays task {self._spec.task.id!r}, and the row names task {task!r}",
                "give each task its own environment_factory (a dict of them, the rows naming theirs in `environment`)",
            )
        return self._runtime.run(self._reset(seed if seed is not None else self._seed))

    def get_reward(self) -> float | None:
        """End the episode: answer its turn, wait for the run, return its score (the task's total)."""
        if self._episode is None:
            raise BadInput("get_reward() before reset(): no episode is running", "call reset() first")
        if self._reward is None:
            try:
                self._reward = self._runtime.run(self._finish())
            except EpisodeInfrastructureError:
                if self._on_failure == "drop":
                    return None
                raise
        return self._reward

    # -- ending episodes however the trainer stops --

    def __enter__(self) -> EpisodeEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self._abandon_now("the trainer closed the environment")

    def __del__(self) -> None:
        episode = getattr(self, "_episode", None)
        if episode is not None and episode.run_id in self._runtime.open and self._runtime.loop.is_running():
            asyncio.run_coroutine_threadsafe(
                self._runtime.abandon(episode, "the trainer dropped the environment"), self._runtime.loop
            )

    @classmethod
    def close_all(cls) -> None:
        """Abandon every episode still open in an instance of this class (e.g. when training stopped)."""
        for instance in list(cls._instances):
            instance._abandon_now("the trainer closed its environments")

    def _abandon_now(self, reason: str) -> None:
        if self._episode is not None and self._episode.run_id in self._runtime.open:
            self._runtime.run(self._close_turn())
            self._runtime.run(self._runtime.abandon(self._episode, reason))

    # -- in the loop --

    async def _reset(self, seed: int | None) -> str:
        if self._episode is not None:
            await self._close_turn()
            await self._runtime.abandon(self._episode, "reset before the episode ended")
        self._reward, self._response, self._broken = None, "", None
        episodes = await self._runtime.episodes(self._settings, self._worker)
        spec = self._spec if seed is None else self._spec.with_seed(int(seed))
        self._episode = await spec.start(episodes)
        self.run_id = self._episode.run_id
        self._runtime.open[self.run_id] = self._episode
        self._turn = await self._episode.next_turn(self._agent)
        if self._turn is None:
            raise EpisodeInfrastructureError(
                self.run_id, None, f"the run ended before {self._agent!r} had a turn", "ended"
            )
        if self._turn.offer.env:
            self._stack = contextlib.AsyncExitStack()
            self._tools = await self._stack.enter_async_context(self._turn.tools())
        system = self._turn.system_prompt
        return f"{system}\n\n{self._turn.prompt}" if system else self._turn.prompt

    async def _call(self, name: str, arguments: dict[str, object]) -> str:
        if self._tools is None:
            raise BadInput(f"tool {name!r} called with no turn open", "call reset() first; a turn's tools end with it")
        try:
            result = await self._tools.call(name, arguments)
        except ToolFailed:
            raise
        except Exception as e:
            self._broken = f"tool {name!r} failed outside the tool: {e}"
            raise
        return result if isinstance(result, str) else json.dumps(result)

    async def _close_turn(self) -> None:
        stack, self._stack, self._tools = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    async def _finish(self) -> float:
        episode = self._episode
        assert episode is not None  # (get_reward checked)
        await self._close_turn()
        if self._broken is not None:
            await self._runtime.abandon(episode, self._broken)
            raise EpisodeInfrastructureError(episode.run_id, None, self._broken, "abandoned")
        turn, response = self._turn, self._response
        self._turn = None
        with contextlib.suppress(EpisodeError):  # the run is over already (e.g. the turn's deadline passed)
            while turn is not None:
                await turn.end(response)
                turn, response = await episode.next_turn(self._agent), ""
        try:
            outcome = await episode.outcome()  # EpisodeInfrastructureError when the run could not grade the policy
        finally:
            self._runtime.open.pop(episode.run_id, None)
        if outcome.total is None:
            raise BadInput(f"task {self._spec.task.id!r} records no score", "give it a grading step (e.g. check_state)")
        return float(outcome.total)


def answers(completions: list, environments: list, **_: object) -> list[None]:
    """A reward function that scores nothing: listed in `reward_funcs`, it runs before the environments'
    `get_reward` and gives each episode the rollout's final message (its last assistant text) as the answer
    to its turn, for tasks that grade the response. Its column is all None (TRL ignores it)."""
    for completion, environment in zip(completions, environments, strict=True):
        if isinstance(environment, EpisodeEnvironment):
            environment._response = _last_text(completion)
    return [None] * len(completions)


def _last_text(completion: str | list) -> str:
    """A completion's final text: the text itself, or its last assistant message's (conversational)."""
    if isinstance(completion, str):
        return completion
    said = [m for m in completion if isinstance(m, dict) and m.get("role") == "assistant"]
    content = said[-1].get("content") if said else ""
    if isinstance(content, list):  # content blocks
        content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return content or ""


def environment_factory(
    task: str | TaskSpec | EpisodeSpec,
    *,
    agent: str | None = None,
    turn_timeout: float | None = None,
    seed: int | None = None,
    settings=None,
    worker: bool | None = None,
    on_infrastructure_error: OnFailure = "raise",
) -> type[EpisodeEnvironment]:
    """A class TRL's `GRPOTrainer(environment_factory=...)` makes an instance of per rollout slot: episodes of
    `task` (a name, a TaskSpec, or an EpisodeSpec) with `agent` played (by default its only prompted agent).
    `turn_timeout` bounds each turn (seconds); `seed` seeds runs whose row has no `seed` column; `settings` and
    `worker` are `Episodes.connect`'s. Starts one episode to list the role's tools, and abandons it."""
    spec = task if isinstance(task, EpisodeSpec) else EpisodeSpec.from_task(task, [agent] if agent else None)
    if turn_timeout is not None:
        spec = EpisodeSpec.from_task(spec.task, spec.trainer_agents, turn_timeout=turn_timeout, seed=spec.seed)
    if len(spec.trainer_agents) != 1:
        raise BadInput(
            f"a TRL rollout plays one agent, and the episode plays {spec.trainer_agents}",
            "name the one agent the model plays: environment_factory(task, agent=NAME)",
        )
    runtime = _the_runtime()
    listed = runtime.run(_role_tools(runtime, spec, settings, worker))
    namespace: dict[str, object] = {
        "_spec": spec,
        "_agent": spec.trainer_agents[0],
        "_settings": settings,
        "_worker": worker,
        "_seed": seed,
        "_on_failure": on_infrastructure_error,
        "_instances": weakref.WeakSet(),
        "__module__": __name__,
        "__qualname__": spec.task.id,
    }
    for tool in listed:
        namespace[tool["name"]] = _method(tool)
    return type(spec.task.id, (EpisodeEnvironment,), namespace)


async def _role_tools(runtime: _Runtime, spec: EpisodeSpec, settings, worker: bool | None) -> list[ToolInfo]:
    """The played role's tools, as the gateway lists them in a first episode (abandoned once listed)."""
    episode = await spec.start(await runtime.episodes(settings, worker))
    runtime.open[episode.run_id] = episode
    try:
        turn = await episode.next_turn(spec.trainer_agents[0])
        if turn is None or not turn.offer.env:
            return []
        async with turn.tools() as tools:
            return tools.list()
    finally:
        await runtime.abandon(episode, "it listed the role's tools for a TRL environment")


# A JSON Schema's types as the Python hints TRL (transformers' get_json_schema) turns back into them.
_TYPES: dict[str, object] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
    "null": type(None),
}
_RESERVED = {"reset", "get_reward", "close_all", "run_id"}


def _hint(schema: object) -> object:
    if not isinstance(schema, dict):
        return str
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, str | int | float | bool) for v in enum):
        return Literal[tuple(enum)]
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        return list[_hint(items)] if isinstance(items, dict) and items else list  # type: ignore[misc]
    if isinstance(kind, str) and kind in _TYPES:
        return _TYPES[kind]
    options = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(kind, list):
        options = [{"type": k} for k in kind]
    if isinstance(options, list) and options:
        return typing.Union[tuple(_hint(o) for o in options)]  # noqa: UP007  (built from a tuple)
    return str | int | float | bool | list | dict  # any JSON value


def _one_line(text: object) -> str:
    return " ".join(str(text or "").split())


def _method(tool: ToolInfo) -> Callable[..., str]:
    """A method that calls `tool`, with a signature and a Google-style docstring TRL reads its schema from."""
    name = tool["name"]
    if name in _RESERVED or name.startswith("_") or not name.isidentifier():
        raise BadInput(
            f"tool {name!r} cannot be a TRL environment method (reserved, private, or not an identifier)",
            "rename the tool in its environment",
        )
    schema = tool.get("inputSchema") or {}
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    listed = schema.get("required")
    required = set(listed) if isinstance(listed, list) else set()
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, object] = {"return": str}
    lines = []
    for arg, prop in properties.items():
        if not arg.isidentifier() or keyword.iskeyword(arg) or arg == "self":
            raise BadInput(f"tool {name!r} has argument {arg!r}, which cannot be a Python parameter", "rename it")
        hint = _hint(prop)
        default = inspect.Parameter.empty if arg in required else None
        if arg not in required:
            hint = typing.Optional[hint]  # noqa: UP045  (a hint built at run time)
        parameters.append(inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint))
        annotations[arg] = hint
        description = _one_line(prop.get("description") if isinstance(prop, dict) else "") or arg.replace("_", " ")
        lines.append(f"    {arg}: {description}")

    def call(self: EpisodeEnvironment, **arguments: object) -> str:
        return self._runtime.run(self._call(name, arguments))

    call.__name__ = call.__qualname__ = name
    call.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    call.__annotations__ = annotations
    description = _one_line(tool.get("description")) or name.replace("_", " ")
    call.__doc__ = description + ("\n\nArgs:\n" + "\n".join(lines) if lines else "")
    return call
