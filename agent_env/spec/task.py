"""A task: a DAG of typed steps. Tasks are written in TOML (see `agent-env schema task`).

A `TaskSpec` checks its own shape and graph. What needs the installed step types, apps and bundles (a
step's config against its type, the steps a config names, the world against the environments) is
checked by `agent_env.planning.tasks`, which loads tasks; the pure checks it runs live here.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from agent_env.spec import framework_triggers
from agent_env.spec.agent import ScriptedAction, ScriptedConfig
from agent_env.spec.duration import Duration
from agent_env.spec.templates import referenced_steps
from agent_env.spec.world import ClockSpec, PersonaSpec, TriggerSpec

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$"
WORLD_STEPS = ("sync_env_clock", "register_env_triggers", "cancel_triggers", "wait_clock")


class FailurePolicy(StrEnum):
    """What a failed step does to the run (`on_failure`)."""

    FAIL = "fail"  # the run stops and ends in error
    CONTINUE = "continue"  # recorded; dependents still run
    SKIP_DEPENDENTS = "skip_dependents"  # recorded; dependents are skipped, other branches go on


class StepSpec(BaseModel):
    """One step of a task: its `type` (`agent-env steps list`), its `config` (checked against the type when the
    task is loaded), and the steps it waits for."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=NAME_PATTERN, description="unique within the task; other steps refer to it")
    type: str = Field(description="a registered step type, e.g. `check`")
    description: str = ""
    depends_on: list[str] = Field(default_factory=list, description="ids of steps that must finish first")
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="the step type's settings; strings may hold ${steps.ID.outputs.PATH} references",
    )
    on_failure: FailurePolicy = Field(FailurePolicy.FAIL, description="fail | continue | skip_dependents")
    timeout: Duration | None = Field(None, description="per attempt; default: the step type's")
    retries: int | None = Field(None, ge=0, le=100, description="extra attempts; default: the step type's")


def _one_turn(value: Any) -> Any:
    """An oracle written as a list of actions (the fake model's script format) is one turn."""
    return {"turns": [value]} if isinstance(value, list) else value


# A scripted agent's turns (`{turns = [[...], ...]}`), or one turn's actions as a list (`[[oracle.STEP]]` tables).
OracleScript = Annotated[
    ScriptedConfig, BeforeValidator(_one_turn, json_schema_input_type=ScriptedConfig | list[ScriptedAction])
]


class TaskSpec(BaseModel):
    """A task file. Steps without a dependency between them run concurrently."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=NAME_PATTERN)
    version: str = Field("1", min_length=1, max_length=64)
    description: str = ""
    seed: int = Field(0, description="seeds everything random in the run (e.g. random trigger intervals)")
    timeout: Duration | None = Field(
        None,
        description="the whole run's limit (real time): past it, running steps "
        "are cancelled, the run errors and its sandboxes go",
    )
    clock: ClockSpec | None = Field(None, description="the world's clock; without one, time is the host's")
    personas: dict[str, PersonaSpec] = Field(default_factory=dict, description="simulated people, by name")
    triggers: list[TriggerSpec] = Field(default_factory=list, description="rules: when X happens, do Y")
    steps: list[StepSpec] = Field(min_length=1)
    oracle: dict[str, OracleScript] = Field(
        default_factory=dict,
        exclude_if=lambda oracle: not oracle,  # (so a task without one dumps, and digests, as it always did)
        description="scripted answers that must score 1.0, by deploy_agent step id: `agent-env task check` runs the "
        "task with each named agent replaced by a scripted agent playing its turns (a scripted agent's config, or "
        "one turn's actions as a list: `[[oracle.STEP]]` tables of `tool` + `arguments` or `say`), "
        "then with an agent that says nothing (the task must fail), and checks two runs of one seed agree",
    )
    _bundle: Path | None = PrivateAttr(None)  # the bundle folder it was loaded from

    @property
    def bundle(self) -> Path | None:
        return self._bundle

    def step(self, step_id: str) -> StepSpec:
        """The step with this id (StopIteration if there is none)."""
        return next(s for s in self.steps if s.id == step_id)

    @model_validator(mode="before")
    @classmethod
    def _world_from_steps(cls, data: Any) -> Any:
        """The framework's tasks (JSON lists of steps) have no [clock] or [[triggers]]: a sync_env_clock step's
        absolute `virtual_time` starts the world's clock there (standing until the step sets its pace), and a
        trigger written in full in a register_env_triggers step's `triggers` joins the task's, named by its id."""
        if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
            return data
        steps = [s for s in data["steps"] if isinstance(s, dict) and isinstance(s.get("config"), dict)]
        if data.get("clock") is None:
            start = next(
                (
                    t
                    for s in steps
                    if s.get("type") == "sync_env_clock" and _absolute(t := s["config"].get("virtual_time"))
                ),
                None,
            )
            if start is not None:
                data = {**data, "clock": {"start": start, "mode": "frozen"}}
        if any(s.get("type") == "register_env_triggers" and _has_objects(s["config"].get("triggers")) for s in steps):
            triggers = list(data.get("triggers") or [])
            data = {
                **data,
                "steps": [_triggers_by_id(s, i, steps, triggers) for i, s in enumerate(data["steps"])],
                "triggers": triggers,
            }
        return data

    @model_validator(mode="after")
    def _check_graph(self) -> TaskSpec:
        if problems := graph_problems(self.steps):
            raise ValidationError.from_exception_data("TaskSpec", problems)
        agents = [s.id for s in self.steps if s.type == "deploy_agent"]
        if unknown := sorted(set(self.oracle) - set(agents)):
            raise ValueError(
                f"oracle names {', '.join(map(repr, unknown))}, not a deploy_agent step of the task — key each "
                f"scripted answer by the id of the step that deploys its agent ({', '.join(agents) or 'none here'})"
            )
        return self

    @property
    def has_world(self) -> bool:
        """Triggers, personas or steps that act on the world's clock and rules."""
        return bool(self.triggers or self.personas or any(s.type in WORLD_STEPS for s in self.steps))


def _absolute(value: Any) -> bool:
    """An RFC 3339 time with an offset (not `+DURATION`, not a `${...}` reference)."""
    if not isinstance(value, str):
        return False
    try:
        return datetime.fromisoformat(value.strip().replace("Z", "+00:00")).tzinfo is not None
    except ValueError:
        return False


def _triggers_by_id(step: Any, index: int, steps: list[Any], triggers: list[Any]) -> Any:
    """The step, its triggers written in full moved to `triggers` and named by their ids; those written in the
    framework's format are read into ours (agent_env.spec.framework_triggers), with the step's fields they use."""
    if not (
        isinstance(step, dict) and step.get("type") == "register_env_triggers" and isinstance(step.get("config"), dict)
    ):
        return step
    written = step["config"].get("triggers")
    if not _has_objects(written):
        return step
    config = dict(step["config"])
    if any(framework_triggers.is_framework(t) for t in written):
        try:
            context = _framework_context(config, steps)
            written = [
                framework_triggers.translate(t, j, str(step.get("id")), context)
                if framework_triggers.is_framework(t)
                else t
                for j, t in enumerate(written)
            ]
        except framework_triggers.FrameworkTriggerError as e:
            error = problem(("steps", index, "config", *e.loc), "framework_trigger", e.text, written)
            raise ValidationError.from_exception_data("TaskSpec", [error]) from None
        for field in framework_triggers.STEP_FIELDS:
            config.pop(field, None)
    triggers += [t for t in written if isinstance(t, dict)]
    ids = [t.get("id") if isinstance(t, dict) else t for t in written]
    return {**step, "config": {**config, "triggers": ids}}


def _framework_context(config: Mapping[str, Any], steps: list[Any]) -> framework_triggers.TriggerContext:
    """What the step's framework triggers need: the deploy_env step of its `env_id`, its watched roles, the
    deploy_agent steps that may play an nl action's executor."""
    env_id = config.get("env_id")
    envs = [s["id"] for s in steps if s.get("type") == "deploy_env" and env_id in _names(s, "env_id", "env")]
    if not isinstance(env_id, str) or len(envs) != 1:
        raise framework_triggers.FrameworkTriggerError(
            "env_id",
            f"{env_id!r} is " + ("deployed by several steps" if envs else "deployed by no deploy_env step"),
            "name the env a deploy_env step of this task deploys once: its triggers watch and act on it",
        )
    executors: dict[str, framework_triggers.Executor] = {}
    for s in steps:
        if s.get("type") == "deploy_agent" and isinstance(s.get("id"), str):
            record = s["config"].get("record")
            name = s["config"].get("as") or s["config"].get("agent") or (record or {}).get("name")
            if isinstance(name, str):
                for key in {s["id"], name}:
                    executors[key] = framework_triggers.Executor(s["id"], name)
    roles = config.get("watch_roles")
    timeout = config.get("executor_timeout_seconds")
    if roles is not None and (not isinstance(roles, list) or not all(isinstance(r, str) and r for r in roles)):
        raise framework_triggers.FrameworkTriggerError("watch_roles", "must be a list of role names", "list them")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise framework_triggers.FrameworkTriggerError(
            "executor_timeout_seconds", f"must be a positive number, not {timeout!r}", "give seconds"
        )
    return framework_triggers.TriggerContext(
        envs[0], roles, executors, config.get("executor_agent_name"), None if timeout is None else float(timeout)
    )


def _names(step: Mapping[str, Any], *fields: str) -> list[Any]:
    return [step["config"].get(f) for f in fields]


def _has_objects(value: Any) -> bool:
    return isinstance(value, list) and any(isinstance(t, dict) for t in value)


def problem(loc: tuple[Any, ...], kind: str, message: str, value: Any) -> InitErrorDetails:
    """One problem, reported as pydantic reports a field's (the text is used as it is)."""
    return InitErrorDetails(type=PydanticCustomError(kind, message), loc=loc, input=value)


def suggest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f"did you mean '{close[0]}'? " if close else ""


def graph_problems(steps: list[StepSpec]) -> list[InitErrorDetails]:
    """The steps form a DAG: ids unique, dependencies known, no cycle."""
    problems: list[InitErrorDetails] = []
    first_index: dict[str, int] = {}
    for i, s in enumerate(steps):
        if s.id in first_index:
            problems.append(
                problem(
                    ("steps", i, "id"),
                    "duplicate_step",
                    f"duplicate step id '{s.id}' (also steps[{first_index[s.id]}]) — give each step its own id",
                    s.id,
                )
            )
        else:
            first_index[s.id] = i
    known = list(first_index)
    for i, s in enumerate(steps):
        for dep in s.depends_on:
            if dep == s.id:
                problems.append(
                    problem(
                        ("steps", i, "depends_on"),
                        "self_dependency",
                        f"step '{s.id}' depends on itself — remove '{dep}'",
                        s.depends_on,
                    )
                )
            elif dep not in first_index:
                problems.append(
                    problem(
                        ("steps", i, "depends_on"),
                        "unknown_dependency",
                        f"'{dep}' is not a step of this task — {suggest(dep, known)}known steps: {', '.join(known)}",
                        s.depends_on,
                    )
                )
    if problems:
        return problems
    cycle = find_cycle({s.id: s.depends_on for s in steps})
    if cycle:
        path = " → ".join(cycle)
        return [
            problem(
                ("steps", first_index[cycle[0]], "depends_on"),
                "dependency_cycle",
                f"dependency cycle {path} — remove one of these depends_on entries",
                cycle,
            )
        ]
    return []


def reference_problems(steps: list[StepSpec], step_refs: Callable[[str], Sequence[str]]) -> list[InitErrorDetails]:
    """What a step's config names must be upstream of it: `${steps.ID...}` references, and the config
    fields that name a step (`step_refs(type)`, e.g. the `env` a step acts on). For a graph without problems."""
    problems: list[InitErrorDetails] = []
    known = [s.id for s in steps]
    for i, s in enumerate(steps):
        ancestors = upstream(s.id, {t.id: t.depends_on for t in steps})
        for field in step_refs(s.type):
            problems += _step_ref_problems(i, s, field, ancestors, known)
        for ref in sorted(referenced_steps(s.config)):
            if ref not in known:
                problems.append(
                    problem(
                        ("steps", i, "config"),
                        "unknown_reference",
                        f"refers to steps.{ref}, which is not a step — {suggest(ref, known)}known steps: {', '.join(known)}",
                        ref,
                    )
                )
            elif ref not in ancestors:
                problems.append(
                    problem(
                        ("steps", i, "config"),
                        "reference_not_upstream",
                        f"refers to steps.{ref}, but '{s.id}' does not depend on it, so its results may not exist yet — add '{ref}' to depends_on",
                        ref,
                    )
                )
    return problems


def _step_ref_problems(
    i: int, step: StepSpec, field: str, ancestors: set[str], known: list[str]
) -> list[InitErrorDetails]:
    """A config field that names another step (e.g. the `env` a step acts on) must name an upstream one."""
    problems = []
    value = step.config.get(field)
    refs = value if isinstance(value, list) else [value]  # one step, or a list (of ids or {step = ...})
    for ref in (r.get("step") if isinstance(r, dict) else r for r in refs):
        problems += _one_step_ref(i, step, field, ref, ancestors, known)
    return problems


def _one_step_ref(
    i: int, step: StepSpec, field: str, ref: Any, ancestors: set[str], known: list[str]
) -> list[InitErrorDetails]:
    problems = []
    if isinstance(ref, str) and not ref.startswith("${"):
        if ref not in known:
            problems.append(
                problem(
                    ("steps", i, "config", field),
                    "unknown_step_ref",
                    f"{ref!r} is not a step of this task — {suggest(ref, known)}name one of "
                    f"its steps (known steps: {', '.join(known)})",
                    ref,
                )
            )
        elif ref not in ancestors:
            problems.append(
                problem(
                    ("steps", i, "config", field),
                    "step_ref_not_upstream",
                    f"refers to step {ref!r}, but '{step.id}' does not depend on it — add '{ref}' to depends_on",
                    ref,
                )
            )
    return problems


def find_cycle(deps: dict[str, list[str]]) -> list[str] | None:
    """A dependency cycle as a closed path (first == last), or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in deps.get(node, []):
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        state[node] = 2
        path.pop()
        return None

    for node in deps:
        if node not in state and (found := visit(node)):
            return found
    return None


def upstream(step_id: str, deps: dict[str, list[str]]) -> set[str]:
    seen: set[str] = set()
    stack = list(deps.get(step_id, []))
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(deps.get(node, []))
    return seen
