"""`Task.get(id, version=None)`: a task by the id a trainer gives it, wherever this install keeps it.

Looked for in order, as `agent-env run` looks: a path (a bundle folder or a task file); a built-in bundle's name
(its own task); a task file of that name in a built-in bundle or in a bundle in the working directory (what
`agent-env run` lists); then the registry (the shared stores), its latest version or the one `version` labels.
A task here counts for a `version` only when its own `version` is that label; otherwise the registry's is used.
"""

from __future__ import annotations

from pathlib import Path

from agent_env import bundles
from agent_env.errors import BadInput, NotFound
from agent_env.spec.loader import read_task_file
from agent_env.spec.task import TaskSpec, suggest


def task_by_id(task_id: str, version: str | int | None = None, *, cwd: Path | None = None) -> TaskSpec:
    from agent_env.planning.tasks import load_task

    label = None if version is None else str(version)
    path = Path(task_id).expanduser()
    if path.exists() or task_id.endswith(".toml"):
        return _at_version(bundles.resolve_target(task_id), label, str(path))
    if label is None and bundles.is_bundle(bundles.BUILTIN_ROOT / task_id):
        return bundles.resolve_target(task_id)  # a built-in bundle's name: its own task, as `agent-env run NAME`
    here = cwd or Path.cwd()
    files = _task_files(task_id, here)
    labelled = {f: str(read_task_file(f).get("version", "1")) for f in files}
    fitting = [f for f in files if label is None or labelled[f] == label]
    if len(fitting) > 1:
        raise BadInput(
            f"task {task_id!r}{_at(label)} is in {len(fitting)} bundles: {', '.join(map(str, fitting))}",
            f"give the path of the one you mean, e.g. Task.get({str(fitting[-1])!r})",
        )
    if fitting:
        return load_task(fitting[0])
    seen = [f"{f} is version {labelled[f]!r}" for f in files]
    found = _registered(task_id, label, seen)
    if found is not None:
        return found
    known = sorted({name for r in bundles.runnables(here) for name in r.tasks})
    raise NotFound(
        f"no task {task_id!r}{_at(label)} in the built-in bundles, the bundles in {here}, or the registry"
        + (f" ({'; '.join(seen)})" if seen else ""),
        f"{'' if files else suggest(task_id, known)}`agent-env run` lists the tasks here, `agent-env registry list tasks` the "
        "registry's; push a bundle's tasks with `agent-env registry push FOLDER`, or give a bundle folder's or "
        "task file's path",
    )


def _at(label: str | None) -> str:
    return "" if label is None else f" version {label!r}"


def _at_version(task: TaskSpec, label: str | None, where: str) -> TaskSpec:
    if label is not None and task.version != label:
        raise NotFound(
            f"{where} holds task {task.id!r} version {task.version!r}, not {label!r}",
            "leave out version= for the task at that path, or give the task's id to find the version elsewhere",
        )
    return task


def _task_files(task_id: str, here: Path) -> list[Path]:
    """Task files named `task_id` in the built-in bundles, then in the bundles in the working directory."""
    return [r.path / "tasks" / f"{task_id}.toml" for r in bundles.runnables(here) if task_id in r.tasks]


def _registered(task_id: str, label: str | None, seen: list[str]) -> TaskSpec | None:
    """The registry's task (latest, or at `label`), or None; a label the registry lacks is noted in `seen`."""
    from agent_env.registry.resolve import registry_task

    try:
        return registry_task(task_id if label is None else f"{task_id}@{label}")
    except NotFound as e:  # the registry has the task, but not at that label
        seen.append(f"the registry's {e.problem.removeprefix('task ')}: {e.fix}" if e.fix else e.problem)
        return None
