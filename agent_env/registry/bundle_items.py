"""A bundle folder read into registry items: its envs (`envs/NAME/`), agents (`agents/NAME/`), artifacts
(`artifacts/NAME`, a file or a folder), tasks (`tasks/NAME.toml`) and evals (`evals/NAME.toml`).

An eval is its record alone: the task references it makes, those naming the bundle's own tasks pinned to the
labels pushed with it (a reference to a registry task keeps the version it gives, or none: the latest).

Records are checked by the same code that loads them for a run (`bundles.find_env`, `bundles.find_agent`,
`planning.tasks.load_task`), and every invalid one is reported at once, so nothing half-valid is pushed.

A task carries what it needs to run elsewhere: the bundle's loose files (`data/`, `models/`, ...: anything
outside `envs/`, `agents/`, `artifacts/` and `tasks/`) as its own files, and the labels of the bundle's envs
and agents it names and of every artifact as its `uses`, so a run by name resolves the versions of push time.

The folder is read through `agent_env.packing`: a link anywhere in it (outside hidden folders, which are not
pushed) refuses the push, so nothing outside the bundle reaches the registry.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

from agent_env import packing
from agent_env.bundles import find_agent, find_env, is_bundle
from agent_env.errors import AgentEnvError, BadInput
from agent_env.planning.tasks import load_task
from agent_env.registry.manifest import file_sha256
from agent_env.registry.models import KINDS, FileEntry, Item, Kind
from agent_env.spec.evals import eval_from

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
ITEM_FOLDERS = ("envs", "agents", "artifacts", "tasks", "evals")


def read_bundle(folder: Path) -> list[Item]:
    """The bundle's items, dependencies first (artifacts, envs, agents, then tasks); BadInput listing every
    invalid record when there is one."""

    folder = folder.expanduser().resolve()
    if not folder.is_dir():
        raise BadInput(f"no folder at {folder}", "give the path of a bundle folder (tasks/, envs/, agents/, ...)")
    try:  # every file and folder that is pushed, no link followed: the records below read only these
        tree = [e for e in packing.walk(folder, skip=lambda name: not _kept(Path(name))) if not e.folder]
    except BadInput as e:
        raise BadInput(f"{e.problem}; nothing was pushed", e.fix) from None
    items: list[Item] = []
    problems: list[str] = []

    def attempt(read, *args) -> None:
        try:
            items.append(read(folder, tree, *args))
        except AgentEnvError as e:
            problems.append(str(e))

    for path in _entries(folder / "artifacts"):
        attempt(_artifact, path)
    for path in _entries(folder / "envs"):
        if path.is_dir():
            attempt(_env, path.name)
    for path in _entries(folder / "agents"):
        if path.is_dir():
            attempt(_agent, path.name)
    if is_bundle(folder):
        loose = _loose_files(folder, tree)
        deps = {kind: {i.name: i.label for i in items if i.kind == kind} for kind in ("envs", "agents", "artifacts")}
        for path in sorted((folder / "tasks").glob("*.toml")):
            attempt(_task, path, loose, deps)
        for path in sorted((folder / "tasks").glob("*.json")):
            attempt(_json_task, path)
    labels = {i.name: i.label for i in items if i.kind == "tasks"}
    for path in sorted((folder / "evals").glob("*.toml")) if (folder / "evals").is_dir() else []:
        attempt(_eval, path, labels)
    if problems:
        n = len(problems)
        raise BadInput(
            f"{folder}: {n} invalid record{'s' if n > 1 else ''}; nothing was pushed\n" + "\n".join(problems),
            "fix each record and push again",
        )
    if not items:
        raise BadInput(f"{folder} holds no envs, agents, artifacts, tasks or evals", "give the path of a bundle folder")
    return items


def _entries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if _kept(p)) if folder.is_dir() else []


def _kept(path: Path) -> bool:
    return not path.name.startswith(".") and path.name != "__pycache__"


def _files(root: Path, tree: list[packing.Entry], *paths: Path) -> list[FileEntry]:
    """Every file of the bundle's `tree` at or under `paths` (files or folders), relative to the bundle `root`."""
    entries = []
    for top in paths:
        rel = top.relative_to(root).as_posix()
        for found in tree:
            if found.path == rel or found.path.startswith(rel + "/"):
                data = packing.read(root, found.path)
                entries.append(FileEntry(path=found.path, sha256=file_sha256(data), size=len(data)))
    return entries


def _checked_name(kind: str, name: str, where: Path) -> str:
    if not NAME.match(name):
        raise BadInput(f"{where}: {kind} name {name!r} is not valid", "use letters, digits, '.', '_' and '-' (max 128)")
    return name


def _as_json(data: dict[str, Any]) -> dict[str, Any]:
    """A TOML table as plain JSON (dates as ISO text), the form a record is digested and stored in."""
    return json.loads(json.dumps(data, default=str))


def _toml(root: Path, path: Path) -> dict[str, Any]:
    """A record of the bundle, read as its files are (no link followed): what is pushed is what was checked."""
    try:
        return tomllib.loads(packing.read(root, path.relative_to(root).as_posix()).decode())
    except UnicodeDecodeError:
        raise BadInput(f"{path} is not UTF-8 text", "save the record as UTF-8") from None
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{path} is not valid TOML: {e}", "fix the syntax at that line") from None


def _env(root: Path, tree: list[packing.Entry], name: str) -> Item:

    path = root / "envs" / name / "env.toml"
    _checked_name("env", name, path.parent)
    if not path.is_file():
        raise BadInput(f"{path.parent} has no env.toml", "add the environment's record, or remove the folder")
    find_env(root, name)  # validates the record and its data files, as a run would
    files = _files(root, tree, path.parent)
    return Item(kind="envs", name=name, record=_as_json(_toml(root, path)), files=files, root=root)


def _agent(root: Path, tree: list[packing.Entry], name: str) -> Item:

    path = root / "agents" / name / "agent.toml"
    _checked_name("agent", name, path.parent)
    if not path.is_file():
        raise BadInput(f"{path.parent} has no agent.toml", "add the agent's record, or remove the folder")
    find_agent(root, name)
    files = _files(root, tree, path.parent)
    return Item(kind="agents", name=name, record=_as_json(_toml(root, path)), files=files, root=root)


def _artifact(root: Path, tree: list[packing.Entry], path: Path) -> Item:
    """`artifacts/NAME` (a file, or a folder with an optional `artifact.toml`: version, description)."""
    name = _checked_name("artifact", path.name, path)
    record: dict[str, Any] = {"name": name, "version": "1"}
    meta = path / "artifact.toml"
    if meta.is_file():
        record.update(_as_json(_toml(root, meta)))
        if not isinstance(record.get("version"), str) or not record["version"]:
            raise BadInput(f"{meta}: version must be a non-empty string", 'write it as version = "1"')
    return Item(kind="artifacts", name=name, record=record, files=_files(root, tree, path), root=root)


def _task(
    root: Path, tree: list[packing.Entry], path: Path, loose: list[FileEntry], deps: dict[str, dict[str, str]]
) -> Item:

    name = _checked_name("task", path.stem, path)
    load_task(path)  # every problem of the task, against this bundle, as `agent-env run` reports them
    record = _as_json(_toml(root, path))
    named = _strings(record)
    uses = {kind: {n: label for n, label in found.items() if n in named} for kind, found in deps.items()}
    uses["artifacts"] = deps.get("artifacts", {})  # referenced by path: a task may read any of them
    uses = {kind: found for kind, found in sorted(uses.items()) if found}
    files = _files(root, tree, path) + loose
    return Item(kind="tasks", name=name, record=record, files=files, uses=uses, root=root)


def _json_task(root: Path, tree: list[packing.Entry], path: Path) -> Item:
    """The framework's JSON tasks run from their folder (`agent-env run`); the registry keeps TOML ones only."""
    raise BadInput(
        f"{path}: the registry holds TOML tasks only for now",
        "run the bundle from its folder (`agent-env run FOLDER`), or write the task as tasks/NAME.toml",
    )


def _eval(root: Path, tree: list[packing.Entry], path: Path, labels: dict[str, str]) -> Item:
    name = _checked_name("eval", path.stem, path)
    spec = eval_from(_toml(root, path), name, str(path))
    for ref in spec.tasks:
        if ref.task in labels and ref.version is None:
            ref.version = labels[ref.task]
    return Item(kind="evals", name=name, record=spec.record(), files=[], root=root)


def _loose_files(root: Path, tree: list[packing.Entry]) -> list[FileEntry]:
    return _files(root, tree, *(p for p in _entries(root) if p.name not in ITEM_FOLDERS))


def _strings(value: Any) -> set[str]:
    """Every string in a record: the names its steps give to envs and agents are among them."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set().union(*(_strings(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_strings(v) for v in value)) if value else set()
    return set()


def kind_of(kind: str) -> Kind:
    """A kind as the CLI spells it (`env` or `envs`, ...); BadInput naming the kinds otherwise."""

    plural = kind if kind.endswith("s") else kind + "s"
    if plural not in KINDS:
        raise BadInput(f"no registry kind {kind!r}", f"use one of: {', '.join(KINDS)}")
    return plural  # type: ignore[return-value]
