"""The framework's fields on our step types: those that name what one of ours names, rewritten into ours; those a
type does not take, refused by name with why. So a field of the framework's step is never an unknown field.

A step type's config model declares both (`StepConfig.framework_names`, `StepConfig.refused_fields`). The
framework names a deployed env by its env id, an agent by its name, a prompt by its prompt id; ours names the step
that deployed or prompted it, which the rewrite finds in the task (upstream of the step, one of them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pydantic import BaseModel
from pydantic_core import InitErrorDetails

from agent_env.errors import BadInput
from agent_env.spec.named_steps import FrameworkName, agent_step, env_step, prompt_step, refusal, verifier_step
from agent_env.spec.task import StepSpec, TaskSpec, problem

_FINDERS: dict[str, Callable[[TaskSpec, str, str], str]] = {
    "env_step": env_step,
    "agent_step": agent_step,
    "prompt_step": prompt_step,
    "verifier_step": verifier_step,
}


def refused_problems(step: StepSpec, model: type[BaseModel]) -> list[InitErrorDetails]:
    """A problem for each field of the step's config its type refuses, at that field."""
    refused: Mapping[str, str] = getattr(model, "refused_fields", {})
    return [
        problem(("config", field), "refused_field", refusal(field, why), step.config[field])
        for field, why in refused.items()
        if field in step.config
    ]


def without_refused(config: dict[str, object], model: type[BaseModel]) -> dict[str, object]:
    refused: Mapping[str, str] = getattr(model, "refused_fields", {})
    return {k: v for k, v in config.items() if k not in refused}


def renamed(task: TaskSpec, step: StepSpec, model: type[BaseModel]) -> list[InitErrorDetails]:
    """Rewrite the step's framework fields into ours (in place); the problems of those that cannot be."""
    names: Mapping[str, tuple[str, FrameworkName]] = getattr(model, "framework_names", {})
    problems: list[InitErrorDetails] = []
    for theirs, (ours, how) in names.items():
        if theirs not in step.config:
            continue
        value = step.config[theirs]
        if ours in step.config:
            problems.append(
                problem(("config", theirs), "framework_field", f"give {theirs!r} or {ours!r}, not both", value)
            )
            continue
        try:
            step.config[ours] = _ours(task, step.id, theirs, value, how)
        except BadInput as e:
            problems.append(problem(("config", theirs), "framework_field", str(e).replace("\n  fix:", " —"), value))
            continue
        del step.config[theirs]
    return problems


def _ours(task: TaskSpec, asker: str, theirs: str, value: object, how: FrameworkName) -> object:
    if how == "same":
        return value
    if how == "env_steps":
        if not isinstance(value, list) or len(value) != 1:
            raise BadInput(f"{theirs} names {value!r}; an agent here works in one env", "name one env")
        value, how = value[0], "env_step"
    if how == "prompt_steps":
        return [_ours(task, asker, theirs, value, "prompt_step")]
    if not isinstance(value, str) or not value:
        raise BadInput(f"{theirs} must be a name, not {value!r}", "write the name as a string")
    return _FINDERS[how](task, asker, value)
