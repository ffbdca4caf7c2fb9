"""Bundles: folders holding `tasks/` (and, with later capabilities, `envs/`, `agents/`, `artifacts/`).

A task is `tasks/NAME.toml`, or the framework's `tasks/NAME.json` (a list of steps; `agent_env.spec.json_tasks`).
An eval is `evals/NAME.toml`: a set of task references (`agent_env.spec.evals`).

Built-in bundles live next to this file; `agent-env run NAME` finds them by name.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from agent_env import packing
from agent_env.bundles.aliases import aliased
from agent_env.envs.builtin import app_targets
from agent_env.envs.records import env_for_app, env_record
from agent_env.errors import BadInput, NotFound, from_validation_error
from agent_env.spec.agent import AgentRecord

BUILTIN_ROOT = Path(__file__).parent


@dataclass
class Runnable:
    name: str
    path: Path
    tasks: list[str]
    builtin: bool


TASK_SUFFIXES = (".json", ".toml")  # a TOML task wins over a JSON one of the same name


def is_bundle(folder: Path) -> bool:
    return (folder / "tasks").is_dir() and bool(task_files(folder))


def task_files(bundle: Path) -> dict[str, Path]:
    folder = bundle / "tasks"
    return {p.stem: p for suffix in TASK_SUFFIXES for p in sorted(folder.glob(f"*{suffix}")) if p.is_file()}


def eval_files(bundle: Path) -> dict[str, Path]:
    """The bundle's evals (`evals/NAME.toml`, the framework's form: `agent_env.spec.evals`) by name."""
    folder = bundle / "evals"
    return {p.stem: p for p in sorted(folder.glob("*.toml")) if p.is_file()} if folder.is_dir() else {}


def runnables(cwd: Path | None = None) -> list[Runnable]:
    """Built-in bundles, then bundles in the working directory."""
    found = [
        Runnable(p.name, p, list(task_files(p)), True)
        for p in sorted(BUILTIN_ROOT.iterdir())
        if p.is_dir() and is_bundle(p)
    ]
    here = cwd or Path.cwd()
    if is_bundle(here):
        found.append(Runnable(".", here, list(task_files(here)), False))
    for p in sorted(here.iterdir()) if here.is_dir() else []:
        if p.is_dir() and not p.name.startswith(".") and is_bundle(p):
            found.append(Runnable(p.name, p, list(task_files(p)), False))
    return found


def _alias_bundles(bundle: Path | None) -> list[Path]:
    """Where an alias is looked up (`aliases.toml`): the task's bundle, then the built-in ones."""
    return ([bundle] if bundle else []) + sorted(p for p in BUILTIN_ROOT.iterdir() if p.is_dir())


def dockerfile_env(name: str):
    """The framework's env folder that holds only a Dockerfile: one MCP server built from it and run on Docker (or
    the provider a deploy_env step's `sandbox_type` names), serving streamable HTTP at :8000/mcp (the MCP SDK's
    default; MCP_PORT tells the protocol's env SDK), all its tools to one role, `agent`."""
    sandbox = {"build": ".", "port": 8000, "path": "/mcp", "provider": "docker", "env": {"MCP_PORT": "8000"}}
    app = {"name": name, "sandbox": sandbox}
    try:
        return env_record(
            {
                "name": name,
                "description": f"envs/{name}/Dockerfile, built and run on Docker",
                "apps": [app],
                "roles": {"agent": {"tools": ["*"]}},
            }
        )
    except ValidationError as e:
        raise from_validation_error(e, f"envs/{name}/Dockerfile (its folder's name is the env's)") from None


def find_env(bundle: Path | None, name: str, *, aliases: bool = True):
    """An environment by name: `envs/NAME/env.toml` of the task's bundle, else its `envs/NAME/Dockerfile` alone (the
    framework's form: an MCP server run on Docker, `dockerfile_env`), else `envs/NAME/env.toml` of a built-in bundle
    (worlds are shared: `support-desk`), else a built-in app as a one-app environment, else an alias the task's
    bundle or a built-in one gives an env of theirs (`aliases.toml`).

    Returns (EnvRecord, its folder or None). Data files must be regular files inside the record's folder,
    reached without a link (see `agent_env.packing`).
    """

    path = bundle / "envs" / name / "env.toml" if bundle else None
    if bundle is not None and path is not None and not path.is_file() and (path.parent / "Dockerfile").is_file():
        return dockerfile_env(name), path.parent
    if path is None or not path.is_file():
        path = next(
            (
                p / "envs" / name / "env.toml"
                for p in sorted(BUILTIN_ROOT.iterdir())
                if (p / "envs" / name / "env.toml").is_file()
            ),
            None,
        )
    if path is not None and path.is_file():
        try:
            record = env_record(tomllib.loads(path.read_text()))
        except tomllib.TOMLDecodeError as e:
            raise BadInput(f"{path} is not valid TOML: {e}", "fix the syntax at that line") from None
        except ValidationError as e:
            raise from_validation_error(e, str(path)) from None
        folder = path.parent
        for file in record.data:  # read later without following links: no link, not even one that stays inside
            try:
                packing.check_file(folder, file)
            except packing.NotInside:
                raise BadInput(
                    f"{path}: data file {file!r} is outside the environment's folder",
                    "keep data files inside envs/<name>/",
                ) from None
            except BadInput as e:
                raise BadInput(f"{path}: data file {file!r}: {e.problem}", e.fix) from None
        return record, folder
    if name in app_targets():
        return env_for_app(name), None
    if aliases and (found := aliased(_alias_bundles(bundle), "envs", name)):
        return find_env(*found, aliases=False)  # an alias names a folder, never another alias
    folders = ([bundle] if bundle else []) + sorted(BUILTIN_ROOT.iterdir())
    known = sorted(
        {p.name for f in folders if (f / "envs").is_dir() for p in (f / "envs").iterdir() if (p / "env.toml").is_file()}
    )
    raise NotFound(
        f"no environment {name!r}" + (f" in bundle {bundle.name}" if bundle else ""),
        "use one of: " + ", ".join(known + sorted(set(app_targets()) - set(known))),
    )


def find_agent(bundle: Path | None, name: str, *, with_folder: bool = False, aliases: bool = True):
    """An agent by name: `agents/NAME/agent.toml` of the task's bundle, else of a built-in bundle, else an alias
    the task's bundle or a built-in one gives an agent of theirs (`aliases.toml`).

    With `with_folder`, returns (AgentRecord, its folder): a sandboxed agent's `build` is relative to it.
    """

    folders = ([bundle] if bundle else []) + sorted(p for p in BUILTIN_ROOT.iterdir() if p.is_dir())
    path = next(
        (f / "agents" / name / "agent.toml" for f in folders if (f / "agents" / name / "agent.toml").is_file()), None
    )
    if path is None and aliases and (found := aliased(_alias_bundles(bundle), "agents", name)):
        return find_agent(*found, with_folder=with_folder, aliases=False)
    if path is None:
        known = sorted(
            {
                p.name
                for f in folders
                if (f / "agents").is_dir()
                for p in (f / "agents").iterdir()
                if (p / "agent.toml").is_file()
            }
        )
        raise NotFound(
            f"no agent {name!r}" + (f" in bundle {bundle.name}" if bundle else ""),
            "add agents/<name>/agent.toml to the bundle, give the record inline (`record`), or use one "
            "of: " + (", ".join(known) or "none"),
        )
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{path} is not valid TOML: {e}", "fix the syntax at that line") from None
    data.setdefault("name", name)
    try:
        record = AgentRecord.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(e, str(path)) from None
    return (record, path.parent) if with_folder else record
