"""New versions of an eval made from task references (`agent-env eval create|add-tasks`): each a registry
version of kind `evals`, its record alone, labelled one past the highest numbered label so far. Every task a
reference names must be in the registry (at its pinned version, if any) before the version is written."""

from __future__ import annotations

from pathlib import Path

from agent_env.errors import BadInput, NotFound
from agent_env.registry.bundle_items import NAME
from agent_env.registry.models import Item, PushResult
from agent_env.registry.store import Registry
from agent_env.spec.evals import EvalSpec, TaskRef


def create_eval(registry: Registry, eval_id: str, refs: list[TaskRef]) -> PushResult:
    """A new version of eval `eval_id` naming `refs` (its first, if it has none yet)."""
    _check_id(eval_id)
    _check_tasks(registry, refs)
    return _push(registry, eval_id, refs)


def add_tasks(registry: Registry, eval_id: str, refs: list[TaskRef], base: str | None = None) -> PushResult:
    """A new version of eval `eval_id`: the tasks of version `base` (the latest when None) with `refs` added; a
    reference to a task the eval already names replaces it there (the framework's rule), so none is listed twice."""
    _check_id(eval_id)
    current = registry.eval(eval_id, base)
    _check_tasks(registry, refs)
    merged = {ref.task: ref for ref in current.tasks}
    merged.update({ref.task: ref for ref in refs})
    return _push(registry, eval_id, list(merged.values()))


def _push(registry: Registry, eval_id: str, refs: list[TaskRef]) -> PushResult:
    try:
        labels = [v.label for v in registry.versions("evals", eval_id)]
    except NotFound:
        labels = []
    label = str(max((int(x) for x in labels if x.isdigit()), default=0) + 1)
    spec = EvalSpec(name=eval_id, id=eval_id, version=label, tasks=refs)
    return registry.push(Item(kind="evals", name=eval_id, record=spec.record(), files=[], root=Path(".")))


def _check_id(eval_id: str) -> None:
    if not NAME.match(eval_id):
        raise BadInput(f"--id: {eval_id!r} is not a valid eval id", "use letters, digits, '.', '_' and '-' (max 128)")


def _check_tasks(registry: Registry, refs: list[TaskRef]) -> None:
    for i, ref in enumerate(refs):
        try:
            registry.version("tasks", ref.task, ref.version)
        except NotFound as e:
            raise NotFound(f"[{i}]: {e.problem}", e.fix) from None
