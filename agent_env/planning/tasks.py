"""Load tasks for use: the spec's own checks (`spec.loader`), then those that need what is installed.

A step's type must be registered and its config must fit that type's model; config fields that name a
step must name an upstream one; clock, personas and triggers must fit the environments the task deploys.
Problems are reported like the spec's: with the file, the step and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from agent_env import bundles
from agent_env.envs.records import exposed_tools
from agent_env.errors import AgentEnvError, BadInput
from agent_env.planning.framework_fields import refused_problems, renamed, without_refused
from agent_env.spec.json_tasks import read_json_task
from agent_env.spec.loader import bundle_of, read_task_file, task_problems_error, task_shape
from agent_env.spec.task import StepSpec, TaskSpec, problem, reference_problems, suggest
from agent_env.spec.templates import has_template
from agent_env.spec.world import DeployedEnv, world_problems
from agent_env.step_types import catalog


def parse_task(data: dict[str, Any], where: str, bundle: Path | None = None, *, flat: bool = False) -> TaskSpec:
    """A task from its data (`where` names it in errors; `bundle`: the folder its names resolve in; `flat`: read
    from the framework's JSON list, whose errors name a step's fields without `config`)."""
    try:
        task = task_shape(data, where, flat=flat)
    except BadInput:
        _all_problems_at_once(data, where, bundle, flat)
        raise
    if problems := task_problems(task, bundle):
        error = ValidationError.from_exception_data("TaskSpec", problems)
        raise task_problems_error(error, data, where, flat=flat) from None
    task._bundle = bundle
    return task


def load_task(path: Path) -> TaskSpec:
    """A task file (`.toml`, or the framework's `.json` list of steps); in a bundle's `tasks/`, its names
    resolve in that bundle."""
    if path.suffix == ".json":
        return parse_task(read_json_task(path), str(path), bundle_of(path), flat=True)
    return parse_task(read_task_file(path), str(path), bundle_of(path))


def _all_problems_at_once(data: dict[str, Any], where: str, bundle: Path | None, flat: bool = False) -> None:
    """The task's shape is wrong: raise its problems together with its steps' type and config problems (of
    the steps that are sound in themselves), so one look shows everything to fix. Returns when there are none."""
    if not isinstance(data, dict):
        return
    try:
        TaskSpec.model_validate(data)
    except ValidationError as e:
        shape = e.errors(include_url=False)
    else:
        return
    raw_steps = data.get("steps")
    steps: list[Any] = raw_steps if isinstance(raw_steps, list) else []
    flagged = {err["loc"][1] for err in shape if len(err["loc"]) > 1 and err["loc"][0] == "steps"}
    extra: list[InitErrorDetails] = []
    for i, raw in enumerate(steps):
        if i in flagged:
            continue
        try:
            step = StepSpec.model_validate(raw)
        except ValidationError:
            continue
        extra += _at(("steps", i), step_type_problems(step, {"bundle": bundle}))
    if extra:
        problems: list[InitErrorDetails] = [
            InitErrorDetails(type=PydanticCustomError(err["type"], err["msg"]), loc=err["loc"], input=err.get("input"))
            for err in shape
        ]
        error = ValidationError.from_exception_data("TaskSpec", problems + extra)
        raise task_problems_error(error, data, where, flat=flat)


def task_problems(task: TaskSpec, bundle: Path | None) -> list[InitErrorDetails]:
    """Problems found against the installed step types, apps and bundles: each step's type and config
    first, then what configs name, then the world."""
    context = {"bundle": bundle}
    problems = [
        p for i, step in enumerate(task.steps) for p in _at(("steps", i), step_type_problems(step, context, task))
    ]
    if problems:
        return problems
    if problems := reference_problems(task.steps, _step_refs):
        return problems
    if task.has_world:
        return [
            problem(loc, "world", message, None) for loc, message in world_problems(task, deployed_envs(task, bundle))
        ]
    return []


def step_type_problems(
    step: StepSpec, context: dict[str, Any] | None = None, task: TaskSpec | None = None
) -> list[InitErrorDetails]:
    """The step's type must be registered and its config must fit that type's model; the framework's fields it
    names things by are rewritten into ours (with `task`, which they are found in), those it refuses reported.

    Values that hold ${...} references are checked after they resolve, when the step runs.
    """
    try:
        step_type = catalog.get(step.type)
    except ImportError as e:
        return [
            problem(("type",), "broken_step_type", f"{e} — reinstall or fix the plugin that provides it", step.type)
        ]
    except KeyError:
        names = catalog.names()
        return [
            problem(
                ("type",),
                "unknown_step_type",
                f"unknown step type '{step.type}' — {suggest(step.type, names)}known types: {', '.join(names)} "
                "(plugins add more through the 'agent_env.task_steps' entry-point group)",
                step.type,
            )
        ]
    model = step_type.config
    problems = refused_problems(step, model) + (renamed(task, step, model) if task is not None else [])
    config = without_refused(step.config, model)  # and a framework name left (not rewritten: reported, or no task)
    config = {k: v for k, v in config.items() if k not in getattr(model, "framework_names", {})}
    try:
        model.model_validate(config, context=context)
    except ValidationError as e:
        return problems + [
            InitErrorDetails(
                type=PydanticCustomError(err["type"], err["msg"]),  # no context: the text is used as is
                loc=("config", *err["loc"]),
                input=err.get("input"),
            )
            for err in e.errors(include_url=False)
            if not has_template(err.get("input"))
        ]
    return problems


def deployed_envs(task: TaskSpec, bundle: Path | None) -> dict[str, DeployedEnv]:
    """The environments the task's deploy_env steps bring up, by step id: their tools, roles and agents."""
    envs: dict[str, DeployedEnv] = {}
    for s in task.steps:
        if s.type == "deploy_env" and isinstance(s.config.get("env_id"), str):
            try:
                record, _ = bundles.find_env(bundle, s.config["env_id"])
            except (AgentEnvError, ValueError):
                continue  # reported by the step's own validation
            agents = dict(s.config.get("agents") or {}) or {r: r for r in record.roles}
            envs[s.id] = (exposed_tools(record), set(record.roles), set(agents))
    return envs


def _step_refs(step_type: str) -> tuple[str, ...]:
    """The config fields of a step type that name another step."""
    try:
        return catalog.get(step_type).step_refs
    except (KeyError, ImportError):
        return ()  # reported by the step's own validation


def _at(prefix: tuple[Any, ...], problems: list[InitErrorDetails]) -> list[InitErrorDetails]:
    return [{**p, "loc": (*prefix, *p.get("loc", ()))} for p in problems]
