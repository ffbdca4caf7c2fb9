"""The framework's verifiers name what they grade by what a step made, not by the step: a prompt by its
`prompt_id`, a judge agent by its `agent_name`, an upstream verifier by its `verifier_id`. These rules find the
step of a task that made it (one, and upstream of the step that names it), or say why not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from agent_env.errors import BadInput
from agent_env.spec.task import StepSpec, TaskSpec, upstream

# How one of the framework's fields names what a field of ours names (a step type declares it in its config's
# `framework_names`; agent_env.planning.framework_fields rewrites it): as is, or a deployed env, agent, prompt or
# verifier by the framework's name for it where ours names the step that made it (`env_steps`: a list of envs, of
# which ours takes one; `prompt_steps`: ours is a list).
FrameworkName = Literal["same", "env_step", "env_steps", "agent_step", "prompt_step", "prompt_steps", "verifier_step"]


def refusal(field: str, why: str) -> str:
    """What a refused framework field's error says (a step type's `refused_fields`)."""
    return f"the framework's field {field!r} is not supported here: {why}"


def _config(step: StepSpec, field: str) -> object:
    return step.config.get(field) if isinstance(step.config, dict) else None


def agent_names(step: StepSpec) -> set[str]:
    """The names a deploy_agent step's agent goes by: the step's id, the bundle agent's, its record's, its `as`."""
    record = _config(step, "record")
    names = {
        step.id,
        _config(step, "agent"),
        _config(step, "as"),
        record.get("name") if isinstance(record, dict) else None,
    }
    return {n for n in names if isinstance(n, str)}


def verifier_id(step: StepSpec) -> str:
    """The name a verifier's results go by: its `verifier_id`, else its step id."""
    given = _config(step, "verifier_id")
    return given if isinstance(given, str) and given else step.id


def _named(task: TaskSpec, asker: str, field: str, value: str, matches: Callable[[StepSpec], bool], what: str) -> str:
    found = [s.id for s in task.steps if s.id != asker and matches(s)]
    where = f"step {asker!r}: {field} {value!r}"
    if not found:
        raise BadInput(f"{where} names no {what} of task {task.id!r}", f"add the {what}, or fix the name")
    if len(found) > 1:
        raise BadInput(f"{where} is ambiguous: steps {found} all match", f"give each {what} its own name")
    if found[0] not in upstream(asker, {s.id: s.depends_on for s in task.steps}):
        raise BadInput(f"{where} is step {found[0]!r}, which {asker!r} does not come after", "add it to depends_on")
    return found[0]


def prompt_step(task: TaskSpec, asker: str, prompt_id: str) -> str:
    """The prompt_agent step a `prompt_id` names: the one whose `prompt_id` it is, else the one of that id."""
    by_field = [s for s in task.steps if s.type == "prompt_agent" and _config(s, "prompt_id") == prompt_id]
    if by_field:
        return _named(task, asker, "prompt_id", prompt_id, lambda s: s in by_field, "prompt_agent step")
    return _named(
        task,
        asker,
        "prompt_id",
        prompt_id,
        lambda s: s.type == "prompt_agent" and s.id == prompt_id,
        "prompt_agent step",
    )


def agent_step(task: TaskSpec, asker: str, agent_name: str) -> str:
    """The deploy_agent step that deploys the agent named `agent_name`."""
    return _named(
        task,
        asker,
        "agent_name",
        agent_name,
        lambda s: s.type == "deploy_agent" and agent_name in agent_names(s),
        "deploy_agent step",
    )


def verifier_step(task: TaskSpec, asker: str, verifier: str) -> str:
    """The step whose results go by the name `verifier` (its verifier_id, else its id)."""
    return _named(task, asker, "verifier_ids", verifier, lambda s: verifier_id(s) == verifier, "verifier step")


def env_step(task: TaskSpec, asker: str, env_id: str) -> str:
    """The deploy_env step that deploys the env `env_id` (its `env_id`, or our `env`)."""
    return _named(
        task,
        asker,
        "env_id",
        env_id,
        lambda s: s.type == "deploy_env" and env_id in (_config(s, "env_id"), _config(s, "env")),
        "deploy_env step",
    )
