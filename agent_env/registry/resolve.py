"""`agent-env run NAME[@VERSION]` for a task found only in the registry: its snapshot (the task and the envs,
agents and artifacts it used at push time) is pulled once into a cache folder under the state directory, keyed
by the task version's digest, and runs from there as any bundle does. An eval found only in the registry is its
record (`registry_eval`): its tasks are found as `agent-env run` finds them."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

from agent_env.config import load_settings
from agent_env.errors import NotFound
from agent_env.planning.tasks import load_task
from agent_env.registry.store import open_registry
from agent_env.spec.evals import EvalSpec
from agent_env.spec.task import TaskSpec


def split_ref(target: str) -> tuple[str, str | None]:
    """`NAME@VERSION` -> (NAME, VERSION); `NAME` -> (NAME, None)."""
    name, _, label = target.partition("@")
    return name, label or None


def registry_task(target: str) -> TaskSpec | None:
    """The task `target` names in the registry, ready to run; None when the registry has no task of that name."""
    name, label = split_ref(target)
    settings = load_settings()
    registry = open_registry(settings)
    try:
        try:
            versions = registry.versions("tasks", name)
        except NotFound:
            return None
        version = registry.version("tasks", name, label) if label else versions[-1]
        bundle = settings.state_dir / "registry" / version.digest.removeprefix("sha256:")
        if not (bundle / "tasks" / f"{name}.toml").is_file():
            pull_atomically(registry, version, bundle)
    finally:
        registry.close()
    return load_task(bundle / "tasks" / f"{name}.toml")


def registry_eval(target: str) -> EvalSpec | None:
    """The eval `target` (`NAME[@VERSION]`) names in the registry; None when it has no eval of that name."""
    name, label = split_ref(target)
    registry = open_registry(load_settings())
    try:
        try:
            registry.versions("evals", name)
        except NotFound:
            return None
        return registry.eval(name, label)
    finally:
        registry.close()


def pull_atomically(registry, version, bundle: Path) -> None:
    """Pull into a temporary folder, then rename it into place: the cache folder is whole or absent."""
    bundle.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=bundle.parent, prefix=".pull-"))
    try:
        registry.pull(version, staging)
        with contextlib.suppress(OSError):  # another process put the same snapshot in place first
            staging.rename(bundle)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
