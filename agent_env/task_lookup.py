"""Finding a task by what a user names: a path, a bundle, a built-in bundle's name, or the registry.

Evals (`evals_to_run`, `eval_tasks`): `agent-env run BUNDLE` runs the bundle's evals when it has some, and
`--eval NAME` names one (the bundle's, else the registry's `NAME[@VERSION]`); each task an eval names is the
bundle's of that name (at the version it pins, if it pins one), else the registry's.

Two ways in. `resolve_target` is `agent-env run TARGET [--task NAME]`: a task file, a bundle folder, a built-in
bundle's name, then a task in the registry. `Task.get(id, version=None)` is a trainer's: a path (a bundle folder or
a task file); a built-in bundle's name (its own task); a task file of that name in a built-in bundle or in a bundle
in the working directory (what `agent-env run` lists); then the registry (the shared stores), its latest version
or the one `version` labels. A task here counts for a `version` only when its own `version` is that label;
otherwise the registry's is used.

This sits above the three rooms it looks in (bundles, planning: loading a task; the registry, which loads what it
pulls with planning's checks), so none of them imports another to look further.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agent_env.bundles import BUILTIN_ROOT, eval_files, is_bundle, runnables, task_files
from agent_env.errors import BadInput, NotFound
from agent_env.planning.tasks import load_task
from agent_env.registry.resolve import registry_eval, registry_task
from agent_env.spec.evals import EvalSpec, TaskRef, read_eval_file
from agent_env.spec.loader import read_task_file
from agent_env.spec.task import TaskSpec, suggest


class Task(TaskSpec):
    """`agent_env.task.Task`: a task spec that can be found by its id, e.g. `Task.get("refund")`."""

    @classmethod
    def get(cls, id: str, version: str | int | None = None) -> TaskSpec:
        """The task `id` names: in the built-in bundles, the bundles in the working directory, then the registry
        (its latest version, or `version`); a bundle folder's or task file's path works too. NotFound says where
        it looked and how to put the task there."""
        return task_by_id(id, version)


def resolve_target(target: str, task: str | None = None) -> TaskSpec:
    """A task as `agent-env run` finds it: a .toml path, a bundle folder, a built-in bundle's name, or the
    registry's task of that name (`NAME[@VERSION]`)."""
    path = Path(target).expanduser()
    if path.is_file() or target.endswith((".toml", ".json")):
        return load_task(path)
    if path.is_dir():
        bundle = path
    elif (BUILTIN_ROOT / target).is_dir() and is_bundle(BUILTIN_ROOT / target):
        bundle = BUILTIN_ROOT / target
    else:
        if (found := registry_task(target)) is not None:  # the last place to look: the shared stores
            return found
        names = ", ".join(r.name for r in runnables())
        raise NotFound(
            f"'{target}' is not a built-in bundle, a bundle folder, a task file or a task in the registry",
            f"run one of: {names}; or give the path of a bundle folder or a .toml task file "
            "(`agent-env run` with no argument lists what can run; `agent-env registry list tasks` the registry's)",
        )
    if not is_bundle(bundle):
        raise NotFound(
            f"{bundle} is not a bundle: it has no tasks/*.toml or tasks/*.json", "add a task file under tasks/"
        )
    files = task_files(bundle)
    if task is None:
        if bundle.name in files:  # the bundle's own task; its variants are chosen by name
            task = bundle.name
        elif len(files) > 1:
            raise NotFound(
                f"bundle {bundle.name} has {len(files)} tasks: {', '.join(files)}", "choose one with --task NAME"
            )
        else:
            task = next(iter(files))
    if task not in files:
        raise NotFound(f"bundle {bundle.name} has no task '{task}'", f"choose one of: {', '.join(files)}")
    return load_task(files[task])


def task_by_id(task_id: str, version: str | int | None = None, *, cwd: Path | None = None) -> TaskSpec:
    label = None if version is None else str(version)
    path = Path(task_id).expanduser()
    if path.exists() or task_id.endswith((".toml", ".json")):
        return _at_version(resolve_target(task_id), label, str(path))
    if label is None and is_bundle(BUILTIN_ROOT / task_id):
        return resolve_target(task_id)  # a built-in bundle's name: its own task, as `agent-env run NAME`
    here = cwd or Path.cwd()
    files = _task_files(task_id, here)
    labelled = {f: str(read_task_file(f).get("version", "1")) if f.suffix == ".toml" else "1" for f in files}
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
    known = sorted({name for r in runnables(here) for name in r.tasks})
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
    return [task_files(r.path)[task_id] for r in runnables(here) if task_id in r.tasks]


def _registered(task_id: str, label: str | None, seen: list[str]) -> TaskSpec | None:
    """The registry's task (latest, or at `label`), or None; a label the registry lacks is noted in `seen`."""
    try:
        return registry_task(task_id if label is None else f"{task_id}@{label}")
    except NotFound as e:  # the registry has the task, but not at that label
        seen.append(f"the registry's {e.problem.removeprefix('task ')}: {e.fix}" if e.fix else e.problem)
        return None


def bundle_folder(target: str | None) -> Path | None:
    """The bundle folder `target` names (a folder, or a built-in bundle's name); None for anything else."""
    if target is None:
        return None
    path = Path(target).expanduser()
    if path.is_dir():
        return path
    builtin = BUILTIN_ROOT / target
    return builtin if builtin.is_dir() and not path.suffix else None


def evals_to_run(target: str | None, names: Sequence[str] = ()) -> list[EvalSpec]:
    """The evals `agent-env run TARGET [--eval NAME]...` runs: each named one (the bundle's by file name or id,
    else the registry's `NAME[@VERSION]`), or, with none named, every eval of the bundle (none: run a task)."""
    bundle = bundle_folder(target)
    found = {name: read_eval_file(path) for name, path in (eval_files(bundle) if bundle else {}).items()}
    if not names:
        return list(found.values())
    chosen = []
    for name in names:
        by_id = [spec for spec in found.values() if name in (spec.name, spec.id)]
        spec = by_id[0] if by_id else registry_eval(name)
        if spec is None:
            where = f"bundle {bundle} has no evals/{name}.toml and the registry" if bundle else "the registry"
            raise NotFound(
                f"{where} has no eval {name!r}",
                f"choose one of: {', '.join(found)}"
                if found
                else "push its bundle with `agent-env registry push "
                "FOLDER` (`agent-env registry list evals` lists them), or give the bundle that holds it",
            )
        chosen.append(spec)
    return chosen


def eval_tasks(spec: EvalSpec, bundle: Path | None) -> list[TaskSpec]:
    """The tasks `spec` names, in its order: the bundle's of that name (at the version pinned, if any), else the
    registry's; NotFound naming the eval's file and the reference otherwise."""
    tasks = []
    for i, ref in enumerate(spec.tasks):
        where = f"{spec.source}: tasks[{i}]"
        try:
            found = _bundle_task(bundle, ref) if bundle else None
            found = found or registry_task(str(ref))
        except BadInput as e:
            raise type(e)(f"{where}: {e.problem}", e.fix) from None
        if found is None:
            raise NotFound(
                f"{where}: no task {ref.task!r}" + (f" in {bundle}/tasks/ or" if bundle else "") + " in the registry",
                "check the name, add the task under tasks/, or push it with `agent-env registry push FOLDER`",
            )
        tasks.append(found)
    return tasks


def _bundle_task(bundle: Path, ref: TaskRef) -> TaskSpec | None:
    path = task_files(bundle).get(ref.task)
    if path is None:
        return None
    task = load_task(path)
    return task if ref.version is None or task.version == ref.version else None
