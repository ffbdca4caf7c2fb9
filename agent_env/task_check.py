"""`agent-env task check TASK`: is the task fit to ship? Three checks, each run through the task's own workflow:

- **oracle**: the task with each agent its `oracle` names replaced by a scripted agent playing the oracle's turns
  must pass with score 1.0 (a task no agent can pass is a broken task). A task that prompts no agent is its own
  oracle: it must pass as it is.
- **null**: the task with the agents under test (the oracle's, else the ones its prompt_agent steps prompt)
  replaced by an agent that calls no tool and answers nothing (`NULL_ANSWER`) must not pass (a task anyone passes tests nothing).
- **seed**: two runs with one seed (the oracle's run and one more of it) end with the same status, score, step
  outcomes and world: each environment's end state (`data/get` on the gateway, where the instance is still there)
  and the calls made in it (its trajectory, kept in the object store), compared after what legitimately differs
  between two runs is masked (`MASKED`).

The runs are planned here and started at once; a task without an oracle but with agents fails the oracle check
and runs its null agent twice for the seed check (a scripted agent is deterministic; a model may not be).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from agent_env.bundles import find_agent
from agent_env.config import Settings
from agent_env.errors import BadInput
from agent_env.gateway.embedded import routed
from agent_env.gateway_client import GatewayRefused
from agent_env.gateway_client.wire import JsonObject
from agent_env.planning.runs import plan
from agent_env.planning.tasks import parse_task
from agent_env.spec.agent import AgentRecord, ScriptedAction, ScriptedConfig
from agent_env.spec.run import RunInput, RunState, RunStatus
from agent_env.spec.task import TaskSpec
from agent_env.stores import in_thread, keys, open_stores
from agent_env.temporal import launch

if TYPE_CHECKING:
    from temporalio.client import Client

    from agent_env.gateway_client import GatewayClient
    from agent_env.stores import Stores

DEPLOY_AGENT = "deploy_agent"
# What a deploy_agent step keeps when a scripted agent replaces its agent: where it works and under which name.
_KEPT = ("env", "as", "role", "env_ids", "env_step_id", "agent_name")
# The null agent calls no tool and says only this, every turn (not nothing: a conversation's partner, which reads
# it as the next message, takes no empty one).
NULL_ANSWER = "(no answer)"
NULL_AGENT = ScriptedConfig(turns=[[ScriptedAction(say=NULL_ANSWER)]])
# What differs between two runs of one seed and is not the world: masked before the comparison.
MASKED = (
    "the run's id (wherever it appears)",
    "times (ISO 8601 strings: host-clock stamps)",
    "a trajectory entry's seq, real_time, duration_ms, run_id and instance, and the order of the calls",
    "what a call answered (the world is its exported state and the calls made; a tool's answer, such as a "
    "process's output with its timings, is not)",
)
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$")
_VOLATILE_CALL_KEYS = ("seq", "real_time", "duration_ms", "run_id", "instance", "result")


class CheckRow(BaseModel):
    """One check's outcome: `ok` is None when it does not apply to the task (it then fails nothing)."""

    name: str
    ok: bool | None
    why: str
    runs: list[str] = Field(default_factory=list)
    seconds: float = 0.0


class TaskCheck(BaseModel):
    """What `agent-env task check` found."""

    task: str
    version: str
    seed: int
    checks: list[CheckRow]
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(c.ok is not False for c in self.checks)


@dataclass
class CheckPlan:
    """The planned runs of a check: by role (`oracle`, `again`: the oracle's second run for the seed check,
    `null`), and what the report says of the ones not run."""

    task: TaskSpec
    seed: int
    runs: dict[str, RunInput] = field(default_factory=dict)
    missing_oracle: bool = False
    under_test: list[str] = field(default_factory=list)


def agents_under_test(task: TaskSpec) -> list[str]:
    """The deploy_agent steps the check replaces: the oracle's, else those the task's prompt_agent steps prompt
    (their `agent`; a conversation's partner plays the other side, and stays)."""
    if task.oracle:
        return sorted(task.oracle)
    deployed = {s.id for s in task.steps if s.type == DEPLOY_AGENT}
    prompted = (s.config.get("agent") for s in task.steps if s.type == "prompt_agent")
    return list(dict.fromkeys(a for a in prompted if isinstance(a, str) and a in deployed))


def with_scripted(task: TaskSpec, scripts: dict[str, ScriptedConfig], seed: int, label: str) -> TaskSpec:
    """The task with each deploy_agent step named in `scripts` deploying a scripted agent that plays that script,
    under the agent's own name and role (graders that name the agent, and the gateway's roles, see the same)."""
    data = task.model_dump(mode="json", exclude_none=True)
    data["seed"] = seed
    data.pop("oracle", None)
    for step in data["steps"]:
        if (script := scripts.get(step["id"])) is None:
            continue
        record = _record(task, step["config"])
        config = {k: v for k, v in step["config"].items() if k in _KEPT}
        config["record"] = {
            "name": record.name,
            "description": f"{label} in place of {record.name}",
            "type": "scripted",
            "role": record.role,
            "config": script.model_dump(mode="json", exclude_none=True),
        }
        step["config"] = config
    return parse_task(data, f"task {task.id} ({label})", task.bundle)


def _record(task: TaskSpec, config: JsonObject) -> AgentRecord:
    """The agent a deploy_agent step deploys: inline, or the bundle's (a registry agent's name and role as the
    step gives them: the scripted agent needs no more)."""
    if config.get("record"):
        return AgentRecord.model_validate(config["record"])
    name = config.get("agent") or config.get("a2a_agent_id")
    if not isinstance(name, str):
        raise BadInput("a deploy_agent step the oracle names deploys no agent by name", "give it `agent = NAME`")
    try:
        return find_agent(task.bundle, name)
    except BadInput:
        if config.get("agent_version") is None and config.get("a2a_agent_version") is None:
            raise
        return AgentRecord(name=name, type="scripted", role=config.get("role"))


def plan_check(settings: Settings, task: TaskSpec, seed: int | None = None) -> CheckPlan:
    """The check's runs, planned (nothing started): a bad task fails here, before any run."""
    seed = task.seed if seed is None else seed
    under_test = agents_under_test(task)
    check = CheckPlan(task=task, seed=seed, under_test=under_test, missing_oracle=bool(under_test) and not task.oracle)
    if not under_test:
        own = with_scripted(task, {}, seed, "as it is")
        check.runs["oracle"] = plan(own, launch.new_run_id(task.id), settings)
        check.runs["again"] = plan(own, launch.new_run_id(task.id), settings)
        return check
    null = with_scripted(task, dict.fromkeys(under_test, NULL_AGENT), seed, "the null agent")
    check.runs["null"] = plan(null, launch.new_run_id(task.id), settings)
    if task.oracle:
        oracle = with_scripted(task, task.oracle, seed, "the oracle")
        check.runs["oracle"] = plan(oracle, launch.new_run_id(task.id), settings)
        check.runs["again"] = plan(oracle, launch.new_run_id(task.id), settings)
    else:
        check.runs["again"] = plan(null, launch.new_run_id(task.id), settings)
    return check


async def run_check(
    client: Client, settings: Settings, check: CheckPlan, *, on_done: Callable[[str, RunState], None] | None = None
) -> TaskCheck:
    """Start the check's runs at once, wait for each, and judge them. `on_done` hears of each run as it ends."""
    began = time.monotonic()
    stores = await in_thread(open_stores, settings)
    took: dict[str, float] = {}

    async def one(role: str, inp: RunInput) -> RunState:
        started = time.monotonic()
        state = await launch.wait_result(await launch.start(client, settings, inp, stores=stores))
        took[role] = time.monotonic() - started
        if on_done:
            on_done(role, state)
        return state

    try:
        states = dict(
            zip(check.runs, await asyncio.gather(*(one(r, inp) for r, inp in check.runs.items())), strict=True)
        )
        seed_pair = ("oracle", "again") if "oracle" in check.runs else ("null", "again")
        worlds = await _worlds(settings, stores, [check.runs[r] for r in seed_pair])
    finally:
        stores.close()
    rows = [
        _oracle_row(check, states, took),
        _null_row(check, states, took),
        _seed_row(check, seed_pair, states, worlds, took),
    ]
    task = check.task
    return TaskCheck(
        task=task.id, version=task.version, seed=check.seed, checks=rows, seconds=round(time.monotonic() - began, 2)
    )


def _oracle_row(check: CheckPlan, states: dict[str, RunState], took: dict[str, float]) -> CheckRow:
    if check.missing_oracle:
        return CheckRow(
            name="oracle",
            ok=False,
            why=f"no oracle: add [oracle.STEP] to the task, the turns a scripted agent plays in place of "
            f"{', '.join(check.under_test)} to score 1.0",
        )
    state = states["oracle"]
    label = "the task as it is (it prompts no agent)" if not check.under_test else "the oracle"
    ok = state.status is RunStatus.PASSED and state.score == 1.0
    outcome = f"scored {_score(state)}" if state.score is not None else f"ended {state.status.value}"
    why = f"{label} {outcome}" + ("" if ok else f", not 1.0: {_trouble(state)}")
    return CheckRow(name="oracle", ok=ok, why=why, runs=[state.run_id], seconds=round(took["oracle"], 2))


def _null_row(check: CheckPlan, states: dict[str, RunState], took: dict[str, float]) -> CheckRow:
    if "null" not in states:
        return CheckRow(name="null", ok=None, why="the task prompts no agent: there is none to replace")
    state = states["null"]
    if state.status is RunStatus.FAILED:
        why, ok = f"an agent that does nothing scored {_score(state)} and failed, as it must", True
    elif state.status is RunStatus.PASSED:
        why, ok = f"an agent that does nothing passed (score {_score(state)}): the task tests nothing", False
    elif state.status is RunStatus.ERROR:  # the task cannot go on without the agent's work: not a pass either
        why, ok = f"an agent that does nothing did not pass: its run ended in an error ({_trouble(state)})", True
    else:
        why, ok = f"the null agent's run ended {state.status.value}: {_trouble(state)}", False
    return CheckRow(name="null", ok=ok, why=why, runs=[state.run_id], seconds=round(took["null"], 2))


def _seed_row(
    check: CheckPlan,
    pair: tuple[str, str],
    states: dict[str, RunState],
    worlds: list[JsonObject],
    took: dict[str, float],
) -> CheckRow:
    a, b = (states[r] for r in pair)
    who = "the null agent" if pair[0] == "null" else "the oracle" if check.under_test else "the task"
    differs = [f"the outcome ({d})" for d in _outcome_diff(a, b)] + [
        f"the world at {p}" for p in world_differences(*worlds)
    ]
    ok = not differs
    why = (
        f"two runs of {who} with seed {check.seed} agree: score {_score(a)}, {len(worlds[0])} environment(s)"
        if ok
        else f"two runs of {who} with seed {check.seed} differ in " + "; ".join(differs[:5])
    )
    return CheckRow(
        name="seed", ok=ok, why=why, runs=[a.run_id, b.run_id], seconds=round(max(took[r] for r in pair), 2)
    )


def _score(state: RunState) -> str:
    return "none" if state.score is None else f"{state.score:g}"


def _trouble(state: RunState) -> str:
    """Why a run did not pass cleanly: its error, else its steps that failed or scored below their threshold."""
    if state.error:
        return state.error[:300]
    low = [
        f"{s.id} {s.score.value:g}" if s.score else f"{s.id} {s.status.value}"
        for s in state.steps.values()
        if (s.score and s.score.value < 1.0) or s.status.value not in ("succeeded", "skipped")
    ]
    return ", ".join(low[:6]) or state.status.value


def _outcome_diff(a: RunState, b: RunState) -> list[str]:
    found = []
    if a.status != b.status:
        found.append(f"status {a.status.value} vs {b.status.value}")
    if a.score != b.score:
        found.append(f"score {_score(a)} vs {_score(b)}")
    for step in sorted(a.steps):
        sa, sb = a.steps[step], b.steps.get(step)
        if sb is None or sa.status != sb.status or (sa.score and sa.score.value) != (sb.score and sb.score.value):
            found.append(f"step {step}")
    return found


async def _worlds(settings: Settings, stores: Stores, inputs: list[RunInput]) -> list[JsonObject]:
    """Each run's world at its end, by environment step: its state (`data/get`, when the instance is still on
    the gateway: a sandboxed one is retired at the run's end) and the calls made in it, masked (`MASKED`)."""
    gateway = await in_thread(routed, settings, stores, start_daemon=False)
    try:
        return [await _world(gateway, stores, inp) for inp in inputs]
    finally:
        await gateway.aclose()


async def _world(gateway: GatewayClient, stores: Stores, inp: RunInput) -> JsonObject:
    world: JsonObject = {}
    for step in inp.steps:
        if not step.deploys_env:
            continue
        instance = f"{inp.run_id}.{step.id}"
        try:
            state: Any = await gateway.data(instance, "data/get")
        except GatewayRefused:
            state = None  # retired with the run (a sandboxed instance): its calls still say what happened
        key = keys.trajectory(inp.run_id, instance)
        lines = (
            (await stores.aio.objects.get(key)).decode().splitlines() if await stores.aio.objects.exists(key) else []
        )
        calls = [{k: v for k, v in json.loads(line).items() if k not in _VOLATILE_CALL_KEYS} for line in lines]
        seen = masked({"state": state, "calls": calls}, inp.run_id)
        seen["calls"] = sorted(seen["calls"], key=lambda c: json.dumps(c, sort_keys=True))
        world[step.id] = seen
    return world


def masked(value: Any, run_id: str) -> Any:
    """`value` with what differs between two runs of one seed masked: the run id, times (`MASKED`)."""
    if isinstance(value, dict):
        return {k: masked(v, run_id) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v, run_id) for v in value]
    if isinstance(value, str):
        return "<time>" if _TIME.match(value) else value.replace(run_id, "<run>")
    return value


def world_differences(a: JsonObject, b: JsonObject) -> list[str]:
    """Where two runs' masked worlds differ: JSON paths (`STEP.state...`, `STEP.calls.N...`), at most ten."""
    return _diff(a, b, "")


def _diff(a: Any, b: Any, path: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        found = [f"{path}.{k}".lstrip(".") for k in sorted(set(a) ^ set(b), key=str)]
        for k in sorted(set(a) & set(b), key=str):
            found += _diff(a[k], b[k], f"{path}.{k}")
        return found[:10]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [p for i, (x, y) in enumerate(zip(a, b, strict=True)) for p in _diff(x, y, f"{path}.{i}")][:10]
    return [] if a == b else [path.lstrip(".") or "(the whole)"]
